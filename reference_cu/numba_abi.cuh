// numba_abi.cuh -- Numba's argument layout, for the diagnostic "<kernel>_numba_abi" entries.
//
// numba-cuda passes a C-contiguous array to a kernel as the members of its data model, each its own
// 8-byte parameter: meminfo, parent, nitems, itemsize, data, shape[ndim], strides[ndim] (56 bytes for a
// vector, 72 for a matrix). A struct of the same members passed by value puts the same bytes at the
// same parameter offsets, so an entry taking these structs is the twin's code reading its pointers and
// sizes where Numba's kernel reads them: `python -m bench probe twins` times such entries beside the
// twins to show what the layout alone costs (numba_softmax.peers.nvcc_twins.NUMBA_ABI_TWINS).
#pragma once

template <typename T, int NDIM>
struct NumbaArray {
    void* meminfo;
    void* parent;
    long long nitems;
    long long itemsize;
    T* data;
    long long shape[NDIM];
    long long strides[NDIM];
};

template <typename T>
using NumbaVector = NumbaArray<T, 1>;
