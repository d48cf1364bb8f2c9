"""The variant registry (bench/variants/): names checked when registered, a duplicate named with both files,
an unknown name refused with the available ones, ``--variants`` / ``--variant-file`` checked before anything
runs. The runs themselves (validated, compared, refused when wrong) are tests/sim/test_variants_sim.py."""

import textwrap

import pytest

import bench.cli
from bench import variants
from bench.cli import main


@pytest.fixture(autouse=True)
def empty_registry(monkeypatch):
    """Each test starts from an empty registry and leaves the process's own untouched."""
    monkeypatch.setattr(variants, "_REGISTRY", {"A": {}, "B": {}})
    monkeypatch.setattr(variants, "_LOADED_FILES", set())


def _variant_file(folder, name, body):
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


KERNEL_FILE = """
    from bench.variants import kernel_variant

    @kernel_variant("mine")
    def launches(x, y):
        return []
"""


def test_a_file_registers_its_variant_once(tmp_path):
    path = _variant_file(tmp_path, "mine.py", KERNEL_FILE)
    chosen = variants.select("A", ["mine"], [path, path])  # the same file twice is loaded once
    assert [v.name for v in chosen] == ["mine"]
    assert chosen[0].experiment == "A" and chosen[0].bitwise_with is None
    assert chosen[0].source == str(path.resolve())
    record = variants.record(chosen)
    assert record["mine"]["source"] == str(path.resolve()) and len(record["mine"]["sha256"]) == 64


def test_an_unknown_name_lists_the_available_ones(tmp_path):
    path = _variant_file(tmp_path, "mine.py", KERNEL_FILE)
    with pytest.raises(variants.VariantError, match=r"unknown Experiment A variant\(s\) yours; available: mine"):
        variants.select("A", ["yours"], [path])
    with pytest.raises(variants.VariantError, match=r"unknown Experiment B variant\(s\) mine; available: none"):
        variants.select("B", ["mine"], [path])


def test_a_duplicate_name_names_both_files(tmp_path):
    first = _variant_file(tmp_path, "first.py", KERNEL_FILE)
    second = _variant_file(tmp_path, "second.py", KERNEL_FILE)
    variants.load_file(first)
    with pytest.raises(variants.VariantError, match="duplicate Experiment A variant 'mine'") as raised:
        variants.load_file(second)
    assert str(first.resolve()) in str(raised.value) and str(second.resolve()) in str(raised.value)


def test_the_same_name_may_serve_both_experiments():
    variants.kernel_variant("shared")(lambda x, y: [])
    variants.scheduler_variant("shared")(lambda buffers: [])
    assert variants.select("B", ["shared"])[0].bitwise_with == "separate"


@pytest.mark.parametrize("register, message", [
    (lambda: variants.kernel_variant("fused"), "one of Experiment A's own variants"),
    (lambda: variants.scheduler_variant("dag"), "one of Experiment B's own variants"),
    (lambda: variants.kernel_variant("mine-nvcc"), "not ending in -nvcc or -floor"),
    (lambda: variants.kernel_variant("a,b"), "no ',' or '/'"),
    (lambda: variants.kernel_variant("Mine"), "lower-case"),
])
def test_names_the_experiments_use_are_refused(register, message):
    with pytest.raises(variants.VariantError, match=message):
        register()(lambda *args: [])


def test_bitwise_with_names_a_variant_of_the_same_algorithm():
    with pytest.raises(variants.VariantError, match="bitwise_with must be None, 'fused' or 'stages'"):
        variants.kernel_variant("mine", bitwise_with="cudnn")


@pytest.mark.parametrize("args, message", [
    (["--experiment", "A", "--variants", "a,,b"], "give distinct, comma-separated names"),
    (["--experiment", "A", "--variants", "a,a"], "give distinct, comma-separated names"),
    (["--experiment", "A", "--variant-file", "mine.py"], "--variants names the ones to run"),
    (["--experiment", "A", "--variants", "mine", "--variant-file", "absent.py"], "no such file absent.py"),
])
def test_variant_arguments_are_checked_before_anything_runs(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench.cli, "select_backend", lambda **_: pytest.fail("the backend was chosen"))
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
