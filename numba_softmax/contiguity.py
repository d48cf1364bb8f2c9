"""Whether an array's strides are C order: what the API, the launch layer and the peers all ask."""


def c_contiguous(shape, strides, itemsize):
    """C order, ignoring the strides of extent-1 dimensions (as numpy, Numba and torch do)."""
    if len(shape) == 2 and strides[1] == itemsize and strides[0] == shape[1] * itemsize:
        return True          # the common case, without the loop (this runs on every call)
    step = itemsize
    for extent, stride in zip(reversed(shape), reversed(strides), strict=True):
        if extent > 1 and stride != step:
            return False
        step *= extent
    return True
