"""Matrix shapes on the command line: ``"4096x128,7x781"`` <-> [(4096, 128), (7, 781)]."""


def parse_shapes(text):
    """``"1x128, 7X781"`` -> [(1, 128), (7, 781)]; a malformed, non-positive or repeated entry raises ValueError."""
    shapes = []
    for item in text.split(","):
        try:
            rows, cols = (int(p) for p in item.strip().lower().split("x"))
        except ValueError:
            raise ValueError(f"--shapes: {item.strip()!r} is not ROWSxCOLUMNS (e.g. 4096x1024)") from None
        if rows <= 0 or cols <= 0:
            raise ValueError(f"--shapes: {item.strip()!r} needs positive rows and columns")
        if (rows, cols) in shapes:
            raise ValueError(f"--shapes: {item.strip()!r} is given twice")
        shapes.append((rows, cols))
    return shapes


def shape_name(shape):
    return f"{shape[0]}x{shape[1]}"


def shape_list(shapes):
    return ", ".join(shape_name(shape) for shape in shapes)
