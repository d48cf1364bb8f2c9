"""``method="auto"``'s geometries: the :class:`Geometry` of one build, its name parser, and the width table.

Host code only, apart from the kernels (as QuACK keeps geometry and shared-memory sizing apart from its
kernels): which threads own which columns of a row, how many rows a block holds, how many bytes of dynamic
shared memory a block takes, which geometry ``auto`` runs for each row length (:data:`AUTO_TABLE`), and the
alternatives one GPU run times beside it (:data:`CANDIDATES`). The kernels that realize a geometry are in
:mod:`.auto_rows`; docs/auto_kernels.md gives the table's reasons and measurements.
"""

from dataclasses import dataclass
from math import gcd

from ..element_types import STORAGE_DTYPES
from ..numerics import QUAD, SIMULATOR, WARP_SIZE

#: The kinds of geometry: a row in one block's registers, in a thread block cluster's, any length, a row of a
#: few elements in one thread's registers, loaded element by element (``narrow_l1_q1``, :mod:`.auto_narrow`), or
#: C-contiguous rows read as whole quads across rows: of 1, 2 or 4 elements (``packed_l1_q<Q>``) or of 3, 5, 6, 7
#: or 8 in groups of whole rows that fill whole quads (``groups_l1_q<Q>``; a row of 8 is a group of one row in two
#: quads; ``staged_l1_q1`` and ``warpstaged_l1_q1``: the same groups of 3 to 7, their quads moved through shared
#: memory in coalesced accesses by the block or by each warp; all of them in the same module).
GEOMETRY_KINDS = ("rows", "cluster", "long", "narrow", "packed", "groups", "staged", "warpstaged")
#: The widths each packed kind takes: rows that fill one quad (or two or four rows a quad), and the rows of a
#: group that fills ``cols / gcd(cols, 4)`` quads (:func:`group_shape`).
PACKED_KIND_WIDTHS = {"packed": (1, 2, 4), "groups": (3, 5, 6, 7, 8), "staged": (3, 5, 6, 7),
                      "warpstaged": (3, 5, 6, 7)}
#: The kinds whose groups move through shared memory, and the threads that stage together in each
#: (:func:`stage_threads`): the block, or each warp with barriers of its own.
STAGED_KINDS = ("staged", "warpstaged")
#: Most quads (groups) per thread of a packed geometry.
MAX_PACKED_QUADS = 4
#: Most quads per thread of any build: a checked build keeps one bit per value in a 32-bit mask.
MAX_QUADS = 8
#: Threads per block of the row kernels whose rows take at most a warp (256 / L rows per block).
GROUP_BLOCK_THREADS = 256
#: Name suffix of a diagnostic fast-math geometry (:attr:`Geometry.fast_math`).
FAST_MATH_SUFFIX = "_fastmath"
#: Most CTAs of a cluster geometry: the portable cluster size (larger ones need an opt-in attribute).
MAX_CLUSTER_CTAS = 8
#: Most quads per thread in shared memory: 16 KiB per 256 lanes (two 512-lane blocks hold 128 KiB).
MAX_SHARED_QUADS = 16


@dataclass(frozen=True)
class Geometry:
    """One selectable geometry: ``kind`` ``rows`` (a row in registers), ``cluster`` (a row in the registers
    of the ``ctas`` CTAs of a thread block cluster), ``long`` (any length), ``narrow`` (a row of at most 4 Q
    elements in one thread, no vector access), ``packed`` (``quads`` quads of C-contiguous memory per thread,
    each holding whole rows of 1, 2 or 4 elements), ``groups`` (``quads`` groups per thread, each the whole
    rows of 3, 5, 6, 7 or 8 elements that fill whole quads) or ``staged`` / ``warpstaged`` (one such group per
    thread, loaded and stored through shared memory by the block / by each warp)."""
    kind: str
    lanes: int      # threads per row (per CTA of the cluster)
    quads: int      # quads (4 values) per thread: per row (rows, cluster) or per chunk (long)
    ctas: int = 1   # CTAs per row (cluster only)
    #: A diagnostic build with Triton's approximate exponential and division (name suffix ``_fastmath``):
    #: never in the table, it measures what the numerics policy costs (``bench perf --auto-geometries``).
    fast_math: bool = False
    #: Quads per thread held in dynamic shared memory after the register ones (``rows`` only, name suffix
    #: ``_s{S}``): a block holds twice the row its registers allow, so an SM keeps two such rows in flight.
    shared_quads: int = 0

    def __post_init__(self):
        if self.kind not in GEOMETRY_KINDS:
            raise ValueError(f"geometry kind {self.kind!r}: expected one of {sorted(GEOMETRY_KINDS)}")
        if self.lanes & (self.lanes - 1) or not 1 <= self.lanes <= 1024:
            raise ValueError(f"geometry {self.name}: lanes must be a power of two from 1 to 1024")
        if not 1 <= self.quads <= MAX_QUADS:
            # A checked build keeps one bit per value in a 32-bit mask.
            raise ValueError(f"geometry {self.name}: quads must be 1 to {MAX_QUADS} (at most 32 values per thread)")
        if self.kind == "cluster" and not (2 <= self.ctas <= MAX_CLUSTER_CTAS and self.lanes > WARP_SIZE):
            raise ValueError(f"geometry {self.name}: a cluster holds 2 to {MAX_CLUSTER_CTAS} CTAs (the portable "
                             f"cluster size) of more than {WARP_SIZE} lanes")
        if self.kind != "cluster" and self.ctas != 1:
            raise ValueError(f"geometry {self.name}: only a cluster geometry spreads a row over several CTAs")
        if self.shared_quads and not (self.kind in ("rows", "cluster") and self.lanes > WARP_SIZE
                                      and 1 <= self.shared_quads <= MAX_SHARED_QUADS):
            raise ValueError(f"geometry {self.name}: quads in shared memory (1 to {MAX_SHARED_QUADS}) are for a rows "
                             f"or cluster geometry of more than {WARP_SIZE} lanes")
        if self.kind == "narrow" and (self.lanes != 1 or self.quads != 1 or self.shared_quads or self.fast_math):
            raise ValueError(f"geometry {self.name}: a narrow geometry is one thread per row (l1) of one quad (q1)")
        if self.packed_widths and (self.lanes != 1 or self.quads > MAX_PACKED_QUADS or self.shared_quads
                                   or self.fast_math):
            raise ValueError(f"geometry {self.name}: a {self.kind} geometry is one thread (l1) of 1 to "
                             f"{MAX_PACKED_QUADS} quads")
        if self.kind in STAGED_KINDS and self.quads != 1:
            raise ValueError(f"geometry {self.name}: a staged geometry holds one group a thread (q1)")
        if self.fast_math and self.kind == "long":
            raise ValueError(f"geometry {self.name}: the fast-math diagnostic builds are row and cluster geometries")

    @property
    def name(self):
        return (f"{self.kind}_l{self.lanes}_q{self.quads}" + (f"_c{self.ctas}" if self.kind == "cluster" else "")
                + (f"_s{self.shared_quads}" if self.shared_quads else "")
                + (FAST_MATH_SUFFIX if self.fast_math else ""))

    @property
    def packed_widths(self):
        """The widths a ``packed`` or ``groups`` geometry takes (C-contiguous rows read across rows); else ()."""
        return PACKED_KIND_WIDTHS.get(self.kind, ())

    @property
    def max_columns(self):
        """The most columns its threads hold (``None``: any): of a ``rows`` or ``cluster`` geometry the row's body
        (:meth:`holds`: the edges are held apart), of a narrow or packed one the whole row."""
        if self.packed_widths:
            return max(self.packed_widths)
        return None if self.kind == "long" else QUAD * self.lanes * (self.quads + self.shared_quads) * self.ctas

    def holds(self, cols, element_type):
        """Whether it takes rows of ``cols`` elements of ``element_type`` at any alignment: a ``rows`` or
        ``cluster`` geometry where the row's body fits its threads (:func:`body_columns`; the head and the tail,
        fewer than a 16-byte unit each, go to the edge slots), a narrow or packed one up to :attr:`max_columns`
        (packed widths: the launcher checks which), the long path any row."""
        if self.max_columns is None:
            return True
        if self.kind in ("rows", "cluster"):
            return body_columns(cols, element_type) <= self.max_columns
        return cols <= self.max_columns

    @property
    def shared_bytes(self):
        """Dynamic shared memory per block (the ``_s{S}`` geometries' quads)."""
        return 4 * QUAD * self.lanes * self.shared_quads

    @property
    def block_threads(self):
        return max(self.lanes, GROUP_BLOCK_THREADS) if self.kind in ("rows", "narrow", *PACKED_KIND_WIDTHS) \
            and self.lanes <= WARP_SIZE \
            else self.lanes

    @property
    def rows_per_block(self):
        return self.block_threads // self.lanes

    @property
    def gpu_only(self):
        """A cluster or ``_s{S}`` geometry runs on a GPU only (thread block clusters, the copy engine), and
        computes in float32 only."""
        return self.kind == "cluster" or self.shared_quads > 0

    @classmethod
    def parse(cls, name):
        fast_math = name.endswith(FAST_MATH_SUFFIX)
        try:
            kind, lanes, quads, *rest = name.removesuffix(FAST_MATH_SUFFIX).split("_")
            extra = {"c": "ctas", "s": "shared_quads"}
            options = {extra[part[0]]: int(part[1:]) for part in rest}
            if len(options) != len(rest):
                raise ValueError(name)
            geometry = cls(kind, int(lanes.removeprefix("l")), int(quads.removeprefix("q")), fast_math=fast_math,
                           **options)
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            if "geometry" in str(exc):
                raise
            geometry = None
        if geometry is None or geometry.name != name:
            raise ValueError(f"unknown auto geometry {name!r}: expected rows_l<L>_q<Q>[_s<S>], "
                             f"cluster_l<L>_q<Q>_c<C>, long_l<L>_q<Q>, narrow_l1_q1, packed_l1_q<Q>, "
                             f"groups_l1_q<Q>, staged_l1_q1 or warpstaged_l1_q1 (a row or cluster one with "
                             f"{FAST_MATH_SUFFIX!r}: a diagnostic fast-math build), e.g. {AUTO_TABLE[0][1]!r}; "
                             f"candidates: {sorted(CANDIDATE_GEOMETRIES)}")
        return geometry


#: Which geometry ``auto`` runs for a row of up to ``max_columns`` (first match); wider rows: the last.
#: Narrow rows: a group of L <= 32 lanes per row, several rows per block, shuffles only; wide rows: more
#: threads per row, 16-32 values per thread in registers; from 16,385 columns half of them in shared memory,
#: to 262,144 the row in the 2-8 CTAs of a thread block cluster (both 16-byte rows on a GPU), beyond (and
#: otherwise) the long-row path (docs/auto_kernels.md).
AUTO_TABLE = (
    (4, "rows_l1_q1"),  # measured: 93.6 / 257.7 us vs rows_l4_q1 279.3 / 666.6 (8388608x4 / 16777216x2)
    (8, "rows_l2_q1"),  # measured: 97.7 us vs rows_l1_q2 105.8, rows_l4_q1 147.7 (4194304x8)
    (16, "rows_l4_q1"),
    (32, "rows_l8_q1"),
    (64, "rows_l16_q1"),
    (128, "rows_l32_q1"),
    (256, "rows_l32_q2"),
    (512, "rows_l32_q4"),
    (1024, "rows_l128_q2"),  # measured: 11.86 / 35.06 us vs rows_l32_q8 12.18 / 36.29 (4096 / 16384 rows)
    (2048, "rows_l128_q4"),
    (4096, "rows_l128_q8"),
    # 32 values per thread and fewer lanes: two or more blocks per SM, one's reductions under another's loads.
    (8192, "rows_l256_q8"),  # measured: 68.2 / 51.8 us vs rows_l512_q4 72.3 / 63.1 (4096x8192 / 4096x6144)
    (16384, "rows_l512_q8"),  # measured: 132.8 / 100.2 us vs rows_l1024_q4 175.2 / 154.9 (4096x16384 / 12288)
    # Half of each thread's quads in shared memory (16-byte rows on a GPU; else the long path): two rows per SM
    # where their registers alone would hold one.
    (32768, "rows_l512_q8_s8"),  # measured: 268.4 us vs rows_l1024_q8 274.3 (4096 rows)
    (65536, "rows_l1024_q8_s8"),  # measured: 279.0 us vs cluster_l512_q8_c4 314.2 (2048 rows)
    # Beyond, the row in a thread block cluster, half of each thread's quads in shared memory too:
    (131072, "cluster_l512_q8_c4_s8"),  # measured: 291.6 us vs cluster_l512_q8_c8 324.7 (1024 rows)
    # The fewest CTAs that hold the row: at 151,936 / 152,064 columns (256 MiB, H100) 105.9 / 105.7 us float32 and
    # 164.4 / 163.9 bfloat16 vs the 8 CTAs of the next entry (58% full) 119.7 / 119.4 and 223.3 / 221.6.
    (163840, "cluster_l512_q8_c5_s8"),
    (262144, "cluster_l512_q8_c8_s8"),  # measured: 301.0 us vs cluster_l1024_q8_c8 368.6 (512 rows)
    (None, "long_l1024_q4"),
)
#: The forward's own entries (softmax and log_softmax: one input array), by the bytes of the wider element and
#: the limit of the entry above they stand for: fewer lanes a row and more quads each, where one input leaves a
#: lane of that entry too few bytes in flight (a quad of a 2-byte type is 8 bytes). A backward (two inputs) keeps
#: the entries above: at 128 columns rows_l32_q1 ran 0.90 / 0.99 of the three-array copy in bfloat16 / float32,
#: ahead of rows_l16_q2 (1.07x / 1.01x its time). Measured (H100, 256 MiB, softmax; 1-64 rows the small problems):
#: 2 bytes, bfloat16: 64 columns rows_l4_q4 110.6 us against rows_l16_q1's 150.4 (torch 146.1); 128 rows_l8_q4
#: 107.6 against rows_l32_q1's 153.3 and rows_l16_q2's 117.8 (torch 124.4), on 1-64 rows 4.3-4.6 against 3.7-3.9;
#: 1024 rows_l32_q8 102.2 against rows_l128_q2's 124.2 and rows_l64_q4's 126.3 (torch 120.6); softmax / log_softmax
#: at 32 columns rows_l2_q4 122.7 / 115.1 against rows_l8_q1's 153.6 / 149.0 (torch 205.7), at 256 rows_l8_q8
#: 104.2 / 97.2 against rows_l32_q2's 118.9 / 118.1 (torch 116.6 / 100.2), at 512 rows_l16_q8 102.5 / 97.2 against
#: rows_l32_q4's 127.5 / 113.4 (torch 113.3 / 112.8), at 2048 rows_l64_q8 100.0 / 92.8 against rows_l128_q4's
#: 125.7 / 116.6 (torch 165.3 / 147.1). Not at 128: rows_l4_q8 ran log_softmax 1.18x faster, softmax 1.06x slower.
#: 4 bytes, float32: 64 columns rows_l8_q2 91.7 against rows_l16_q1's 98.8 (torch 91.3); 128 rows_l16_q2 91.3
#: against rows_l32_q1's 99.3 (torch 92.6), by rows 4096 / 16384 / 65536: 5.68 / 9.82 / 25.4 against 5.60 / 10.2 /
#: 27.5, on 1-64 rows 3.94-4.16 against 3.76-3.94 (torch 3.71-4.16); 127 columns (in the 128 entry) 95.0 against
#: 114.9 (torch 94.0).
FORWARD_TABLE = {
    2: {32: "rows_l2_q4", 64: "rows_l4_q4", 128: "rows_l8_q4", 256: "rows_l8_q8", 512: "rows_l16_q8",
        1024: "rows_l32_q8", 2048: "rows_l64_q8"},
    4: {64: "rows_l8_q2", 128: "rows_l16_q2"},
}
#: Rows of at most this many bytes (``cols`` times the wider of the input and output element) run
#: :data:`NARROW_GEOMETRY` ahead of the table: one thread per row, each element one scalar load, no row span.
#: Measured (256 MiB): float32 at 1 / 2 columns 135 / 111 us against rows_l1_q1's 363 / 260, bfloat16 at 1 / 2 / 4
#: 253 / 159 / 189 against 1420 / 844 / 553; float32 at 3 (H100) 94.0 us against rows_l1_q1's 226 and
#: groups_l1_q1's 115; from 16-byte rows the vector access wins (float32 at 4: 93.7 / 179). The narrow geometry
#: holds at most 4 columns (:data:`NARROW_COLUMNS`).
NARROW_ROW_BYTES = 12
NARROW_COLUMNS = 4
NARROW_GEOMETRY = "narrow_l1_q1"
#: Rows of these widths fill whole quads with whole rows: where every array is C-contiguous and its quads aligned
#: (the launcher checks), they run :func:`packed_geometry`, vector accesses across rows. Measured (256 MiB, softmax):
#: float32 at 1 / 2 / 4 columns 91.5 / 90.0 / 90.9 us against narrow_l1_q1's 127.6 / 98.1 and rows_l1_q1's 93.9
#: (log_softmax at 4: 91.0 against 100.6), bfloat16 at 1 / 2 / 4 92.0 / 92.7 / 93.1 against 225 / 144 / 119.
#: Rows of 3, 5, 6 and 7 elements may run ``groups_l1_q1``: at the :data:`GROUP_WIDTHS` of their element size
#: (:func:`packs_width`; docs/auto_kernels.md). Every width here is one the launcher checks the layout for.
PACKED_WIDTHS = tuple(sorted(w for widths in PACKED_KIND_WIDTHS.values() for w in widths))
#: The packed geometries ``auto`` runs (:func:`packed_geometry`).
PACKED_GEOMETRIES = ("packed_l1_q1", "packed_l1_q2", "groups_l1_q1", "staged_l1_q1")
#: Bytes of input a thread of a packed geometry reads (of all its inputs together), at least one quad of each.
PACKED_INPUT_BYTES = 16


def body_unit(element_type):
    """Elements of a unit of a row's body (:func:`.auto_parts.make_row_span`): 16 aligned bytes, at least a quad
    (4 float32 or float64 elements, 8 of a 2-byte type)."""
    return max(QUAD, 16 // STORAGE_DTYPES[element_type].itemsize)


def body_columns(cols, element_type):
    """The most columns of a row of ``cols`` elements of ``element_type`` in its body, whole :func:`body_unit`
    units, at any alignment of its start: ``cols`` rounded down to a unit. The rest, a head and a tail of fewer
    than a unit each, are the row's edges."""
    unit = body_unit(element_type)
    return cols // unit * unit


#: Rows wider than this look the table up by their body (:func:`body_columns`): a row of ``2^k + 1`` to
#: ``2^k + 7`` columns runs in the entry below the limit, its extra columns as edges. Measured (H100, 256 MiB)
#: 1.10-1.50x faster than in the next entry, most of whose lanes idle: float32 at 129 / 1025 / 32769 / 65537
#: columns 114 / 92.6 / 97.7 / 106 us against 130 / 107 / 117 / 125, bfloat16 at 129 / 1025 / 4097 / 65537
#: 213 / 137 / 106 / 155 against 249 / 180 / 149 / 232. Narrower rows go by their width: there the edges are
#: most of a row (rows_l1_q1 at 3 columns ran 2.4x narrow_l1_q1's time).
BODY_TABLE_FROM = 128


def check_holds(geometry, cols, element_type):
    """Refuse a row of ``cols`` elements of ``element_type`` that ``geometry`` (a :class:`Geometry`) cannot hold
    (:meth:`Geometry.holds`), naming both."""
    if not geometry.holds(cols, element_type):
        held = (f"{body_columns(cols, element_type)} of them in its body"
                if geometry.kind in ("rows", "cluster") else "")
        raise ValueError(f"row too long for geometry {geometry.name}: {cols} columns of {element_type}"
                         f"{' (' + held + ')' if held else ''} > {geometry.max_columns}")


def group_shape(cols):
    """``(rows, quads)`` of the fewest whole rows of ``cols`` elements that fill whole quads: ``4 / gcd(cols, 4)``
    rows in ``cols / gcd(cols, 4)`` quads (1 column: 4 rows in a quad; 4: one row; 3: 4 rows in 3 quads)."""
    common = gcd(cols, QUAD)
    return QUAD // common, cols // common


def stage_threads(geometry):
    """The threads of a staged ``geometry`` that stage their groups together: the block (``staged``) or a warp
    (``warpstaged``)."""
    return WARP_SIZE if geometry.kind == "warpstaged" else geometry.block_threads


def packed_geometry(cols, types, inputs=1):
    """The packed geometry of rows of ``cols`` elements of ``types`` (1 to 7) for an operation
    reading ``inputs`` arrays: at 1, 2 and 4 columns, the quads per thread that read :data:`PACKED_INPUT_BYTES`
    (at least one): float32 and float64 one, a 2-byte type two in a forward and one in a backward (``y`` and
    ``dy``; measured 4-5% faster there than two, while two beat one by 10% in the forward); at 3, 5, 6 and 7, one
    group of whole rows per thread (3 to 7 quads of each input), staged through shared memory in a forward at
    the :data:`STAGED_WIDTHS` of the wider element's size."""
    if inputs == 1 and cols in STAGED_WIDTHS[element_size(types)]:
        return Geometry("staged", 1, 1).name
    if cols in PACKED_KIND_WIDTHS["groups"]:
        return Geometry("groups", 1, 1).name
    quads = max(1, PACKED_INPUT_BYTES // (QUAD * STORAGE_DTYPES[types[0]].itemsize * inputs))
    return Geometry("packed", 1, quads).name


#: The widths ``auto`` runs as groups of rows, by the wider element's bytes (measured, H100, 256 MiB, every
#: operation): 2-byte rows of 3, 5 and 6 at 0.94-1.05 of the copy (2-7x faster than the narrow and rows
#: geometries) and of 7 at 0.57-0.68 (still 1.9-3.0x faster); float32 rows of 5 and 6 faster than rows_l2_q1 by
#: 1.15-1.8x. float32 rows of 3 run narrow (faster in the softmax: 94 us against 115) and of 7 rows_l2_q1 (groups
#: 1.2-2.2x slower: each thread's seven 16-byte accesses 112 bytes apart); float64 rows none (a group of 7 columns
#: spills in a backward). The forwards of float32 rows of 5 and 7 run staged instead (:data:`STAGED_WIDTHS`).
#: A 2-byte row of 8 is a group of one row: bfloat16 softmax / log_softmax 103.6 / 103.7 us against rows_l2_q1's
#: 210.3 / 227.3 (torch 180.7), backwards 89.7 / 90.9 against 127.3 / 126.4; float32 rows of 8 keep rows_l2_q1
#: (softmax 97.8 against groups' 104.3).
GROUP_WIDTHS = {2: (3, 5, 6, 7, 8), 4: (5, 6), 8: ()}
#: The widths whose forward (softmax and log_softmax) runs ``staged_l1_q1``, the groups staged through shared
#: memory, by the wider element's bytes (measured, H100, 256 MiB): float32 rows of 5 and 7, softmax 123 / 126 us
#: against groups_l1_q1's 234 and rows_l2_q1's 163, log_softmax 123 / 127 against 137 / 153 (0.74-0.76 of the
#: copy). Not at 3 and 6 (groups and narrow 0.94-1.0 of the copy, staged 0.75), not for 2-byte rows (staged
#: 1.2-2.2x slower than groups), not in a backward (its thread holds y while dy is staged: 1.00-1.19x the time of
#: groups_l1_q1 at 5 columns and rows_l2_q1 at 7).
STAGED_WIDTHS = {2: (), 4: (5, 7), 8: ()}


def packs_width(cols, types, inputs=1):
    """Whether rows of ``cols`` elements of ``types`` run a packed geometry where the layout allows it in an
    operation reading ``inputs`` arrays: rows of 1, 2 and 4 elements of every type, the :data:`GROUP_WIDTHS` of
    the wider element's size and, in a forward, its :data:`STAGED_WIDTHS`."""
    size = element_size(types)
    return (cols in PACKED_KIND_WIDTHS["packed"] or cols in GROUP_WIDTHS[size]
            or (inputs == 1 and cols in STAGED_WIDTHS[size]))


#: The alternatives one GPU run times beside the table's choice (``bench perf`` variants ``auto:<name>``),
#: by the widths they are meant for. docs/auto_kernels.md gives the prediction for each.
CANDIDATES = {
    1: ("narrow_l1_q1", "packed_l1_q1", "packed_l1_q2", "packed_l1_q4"),
    2: ("narrow_l1_q1", "packed_l1_q1", "packed_l1_q2", "packed_l1_q4"),
    3: ("narrow_l1_q1", "rows_l1_q1", "groups_l1_q1", "staged_l1_q1", "warpstaged_l1_q1"),
    4: ("narrow_l1_q1", "rows_l1_q1", "packed_l1_q1", "packed_l1_q2"),
    5: ("rows_l2_q1", "groups_l1_q1", "staged_l1_q1", "warpstaged_l1_q1"),
    6: ("rows_l2_q1", "staged_l1_q1", "warpstaged_l1_q1"),
    7: ("rows_l2_q1", "groups_l1_q1", "staged_l1_q1", "warpstaged_l1_q1"),
    # A row of 8 as a group of one row (two vector accesses, no edge slots), beside the two-lane rows.
    8: ("rows_l1_q2", "rows_l4_q1", "groups_l1_q1"),
    # More quads a lane for 2-byte rows, as FORWARD_TABLE gives them from 33 columns.
    32: ("rows_l4_q2", "rows_l2_q4"),
    # The table's entry beside the forward's own (FORWARD_TABLE) and more or fewer quads a lane.
    64: ("rows_l16_q1", "rows_l8_q2", "rows_l4_q4"),
    127: ("rows_l32_q1", "rows_l16_q2", "rows_l8_q4"),
    128: ("rows_l32_q1", "rows_l16_q2", "rows_l8_q4", "rows_l4_q8"),
    # More quads per lane for 2-byte rows (FORWARD_TABLE) where the forward has no such entry yet.
    256: ("rows_l16_q4", "rows_l8_q8"),
    512: ("rows_l16_q8",),
    1024: ("rows_l32_q8", "rows_l64_q4", "rows_l128_q2"),
    2048: ("rows_l64_q8",),
    4096: ("rows_l128_q8", "rows_l256_q4", "rows_l512_q2", "rows_l1024_q1", "rows_l64_q8_s8"),
    8192: ("rows_l512_q4", "rows_l1024_q2", "rows_l128_q8_s8"),
    16384: ("rows_l1024_q4", "rows_l256_q8_s8"),
    32768: ("long_l512_q4", "long_l1024_q4", "cluster_l512_q8_c2", "long_l1024_q2"),
    65536: ("long_l1024_q4", "cluster_l1024_q8_c2", "cluster_l512_q8_c4", "cluster_l512_q8_c2_s8", "long_l1024_q2"),
    # long_l1024_q2 here and at 262144: the backward's previous long path (BACKWARD_LONG).
    131072: ("long_l1024_q4", "long_l512_q4", "cluster_l1024_q8_c4", "cluster_l512_q8_c8", "cluster_l1024_q8_c2_s8",
             "long_l1024_q2"),
    # A row a few columns past a table limit runs the entry below it (BODY_TABLE_FROM); the next entry, most of
    # its lanes idle, and the backward's clusters of one CTA more stay here to keep the comparison.
    129: ("rows_l32_q2",),
    1025: ("rows_l128_q4",),
    **{w: ("rows_l256_q8", "rows_l512_q4") for w in range(4097, 4104)},
    16385: ("rows_l512_q8_s8", "cluster_l512_q4_c2", "cluster_l512_q4_c3"),
    32769: ("rows_l1024_q8_s8", "cluster_l512_q4_c5"),
    65537: ("cluster_l512_q8_c4_s8", "long_l1024_q2"),
    # A 2-byte row of ~50k columns across 2 or 4 CTAs (one 1024-lane block runs it at 0.60 of the copy; measured
    # slower, 167.1 / 174.5 us against 158.6), and the 8 CTAs rows of ~152k columns ran in before the table's 5.
    50256: ("cluster_l512_q8_c2_s8", "cluster_l512_q8_c4"),
    151936: ("cluster_l512_q8_c8_s8",),
    152064: ("cluster_l512_q8_c8_s8",),
    262144: ("long_l1024_q4", "cluster_l1024_q8_c8", "cluster_l1024_q8_c4_s8", "long_l1024_q2"),
}
#: Every geometry that has builds: the table's and the candidates'.
CANDIDATE_GEOMETRIES = sorted({name for _, name in AUTO_TABLE} | {NARROW_GEOMETRY, *PACKED_GEOMETRIES}
                              | {n for names in CANDIDATES.values() for n in names})

#: The geometries ``auto`` launches (the table's, the narrow and the packed ones).
TABLE_GEOMETRIES = sorted({name for _, name in AUTO_TABLE} | {NARROW_GEOMETRY, *PACKED_GEOMETRIES}
                          | {name for entries in FORWARD_TABLE.values() for name in entries.values()})
F32 = ("float32", "float32")


def element_size(types):
    """Bytes of the wider of the ``(in_type, out_type)`` elements."""
    return max(STORAGE_DTYPES[t].itemsize for t in types)


def table_geometry(cols, types=F32, packed=False, inputs=1):
    """The geometry for rows of ``cols`` elements of ``types`` in an operation reading ``inputs`` arrays (a
    forward one, a backward two): :func:`packed_geometry`'s where ``packed`` (the arrays' layout allows it) and
    :func:`packs_width`, else :data:`NARROW_GEOMETRY` for rows of at most :data:`NARROW_ROW_BYTES` and
    :data:`NARROW_COLUMNS`, else the one :data:`AUTO_TABLE` names for the row's width, past
    :data:`BODY_TABLE_FROM` columns for its :func:`body_columns` (a forward: its :data:`FORWARD_TABLE` entry
    for the wider element's size where it has one)."""
    if packed and packs_width(cols, types, inputs):
        return packed_geometry(cols, types, inputs)
    if cols <= NARROW_COLUMNS and cols * element_size(types) <= NARROW_ROW_BYTES:
        return NARROW_GEOMETRY
    held = body_columns(cols, types[0]) if cols > BODY_TABLE_FROM else cols
    limit, name = next((limit, name) for limit, name in AUTO_TABLE if limit is None or held <= limit)
    return FORWARD_TABLE.get(element_size(types), {}).get(limit, name) if inputs == 1 else name


def float64_geometry(name):
    """The geometry rows run where the table names ``name`` when either element type is float64: as many
    columns per row with at most :data:`FLOAT64_QUADS` quads per thread and more lanes instead (a float64 value
    takes two registers), and the long-row path (:data:`FLOAT64_LONG`) where that takes more than 1024 lanes or
    past the registers-only entries (clusters and the copy engine are float32 and 2-byte builds)."""
    geometry = Geometry.parse(name)
    if geometry.gpu_only or geometry.kind == "long":
        return FLOAT64_LONG
    if geometry.kind == "narrow" or geometry.packed_widths:  # at most FLOAT64_QUADS quads of a row already
        return geometry.name
    lanes, quads = geometry.lanes, geometry.quads
    while quads > FLOAT64_QUADS:
        lanes, quads = 2 * lanes, quads // 2
    return Geometry("rows", lanes, quads).name if lanes <= 1024 else FLOAT64_LONG


#: Most quads per thread of a float64 build (8 values: 16 registers).
FLOAT64_QUADS = 2
#: The long-row geometry of float64 rows.
FLOAT64_LONG = "long_l1024_q2"


#: Most quads per thread of each of a backward's two inputs in registers (float32 and 2-byte types; float64).
BACKWARD_QUADS = 4
BACKWARD_FLOAT64_QUADS = 1
#: The long-row geometries of a backward: float32 and 2-byte rows the forward's own, 4 quads of each input a thread
#: per chunk (measured, H100, 256 MiB, softmax backward: float32 at 32768 / 65536 columns 114.4 / 131.8 us against
#: long_l1024_q2's 117.5 / 135.0; bfloat16 98.3 / 120.0 against 120.9 / 133.3); float64 one quad.
BACKWARD_LONG = "long_l1024_q4"
BACKWARD_FLOAT64_LONG = "long_l1024_q1"
#: Lanes per CTA of a backward's cluster rows (GPU only; float32 rows): each CTA holds
#: 4 x 512 x BACKWARD_QUADS = 8192 columns of y and dy in registers, two CTAs per SM.
BACKWARD_CLUSTER_LANES = 512


def backward_cluster(cols):
    """The cluster geometry of a backward row of ``cols`` columns past a block's registers: the fewest CTAs of
    :data:`BACKWARD_CLUSTER_LANES` lanes and :data:`BACKWARD_QUADS` quads that hold it (2 to
    :data:`MAX_CLUSTER_CTAS`: to 65,536 columns and 3 more as edges; measured, H100: 65,537 columns 94.0 us in 8
    CTAs against the long path's 134); ``None`` beyond."""
    ctas = -(-body_columns(cols, "float32") // (QUAD * BACKWARD_CLUSTER_LANES * BACKWARD_QUADS))
    return Geometry("cluster", BACKWARD_CLUSTER_LANES, BACKWARD_QUADS, max(2, ctas)).name \
        if ctas <= MAX_CLUSTER_CTAS else None


def backward_geometry(cols, element_type="float32", packed=False):
    """The geometry the backward runs for rows of ``cols`` columns of ``element_type``. A backward
    holds two values per column (``y`` and ``dy``): the forward's rows geometry with at most
    :data:`BACKWARD_QUADS` (float64: :data:`BACKWARD_FLOAT64_QUADS`) quads per thread and more lanes instead;
    where that takes more than 1024 lanes or the forward leaves its registers, float32 rows of up to 65,536
    columns run :func:`backward_cluster` on a GPU (measured, H100, 256 MiB: 0.95-0.97 of the three-array copy,
    1.03-1.47x faster than the long-row path; 2-byte rows ran 1.07-1.46x slower there, so they keep it), the
    others the long-row path; a
    narrow geometry as it is; where ``packed`` and :func:`packs_width` (as :func:`table_geometry`), the rows run
    :func:`packed_geometry` of two inputs."""
    geometry = Geometry.parse(table_geometry(cols, (element_type, element_type), packed, inputs=2))
    if geometry.packed_widths:
        return geometry.name
    float64 = element_type == "float64"
    most = BACKWARD_FLOAT64_QUADS if float64 else BACKWARD_QUADS
    long_name = BACKWARD_FLOAT64_LONG if float64 else BACKWARD_LONG
    if geometry.kind == "narrow":
        return geometry.name
    lanes, quads = geometry.lanes, geometry.quads
    while quads > most:
        lanes, quads = 2 * lanes, quads // 2
    if geometry.kind == "rows" and not geometry.shared_quads and lanes <= 1024:
        return Geometry("rows", lanes, quads).name
    cluster = backward_cluster(cols) if element_type == "float32" and not SIMULATOR else None
    return cluster or long_name


def spill_budget(geometry, float64=False, driver=False):
    """Bytes per thread ptxas may spill in a build of ``geometry`` (``float64``: float64 arithmetic): 0, except
    float64 arithmetic (libdevice's double ``exp`` and IEEE division need more than the 64-register cap: up to
    256) and the rows geometries of :data:`MAX_QUADS` quads (32 values, the row's head and tail bounds and
    their addresses at the cap: up to 48, measured 8-48 with ptxas). ``driver``: the budget of the driver's
    compiler, which spilled 8 bytes in some builds of :data:`MAX_QUADS` quads with a shared span that offline
    ptxas keeps in registers (up to 8 there). A ``groups`` geometry: up to 24 (a backward holds 56 values a
    thread at 7 columns, 7 quads of ``y`` and of ``dy``; measured 8-20 bytes with ptxas 13.0, against 112-224 bytes
    loaded); a ``staged`` one up to 128 (ptxas 12.9: 4-32 bytes stored in the unchecked forward builds, 92-112 in
    the backwards, whose thread holds its group of ``y`` while the block stages ``dy``), a ``warpstaged`` one up to
    320 (measured, ptxas: 48 bytes in the float32 forward, 232-272 in the backwards)."""
    geometry = Geometry.parse(geometry) if isinstance(geometry, str) else geometry
    if float64:
        return 256
    if geometry.kind == "groups":
        return 24
    if geometry.kind in STAGED_KINDS:
        return 320 if geometry.kind == "warpstaged" else 128
    if driver and geometry.quads == MAX_QUADS and geometry.shared_quads:
        return 8
    return 48 if geometry.kind == "rows" and geometry.quads == MAX_QUADS and not geometry.shared_quads else 0


def auto_geometry(cols, types=F32, packed=False):
    """The geometry ``auto`` runs for rows of ``cols`` elements of ``types`` = (in, out) (where either is float64,
    :func:`float64_geometry` of it): :func:`table_geometry`'s (``packed``: as there), except that in the simulator
    a GPU-only geometry (cluster, ``_s{S}``) gives way to the long-row path (the table's last entry)."""
    name = table_geometry(cols, types, packed)
    if "float64" in types:
        return float64_geometry(name)
    if SIMULATOR and Geometry.parse(name).gpu_only:
        return AUTO_TABLE[-1][1]
    return name
