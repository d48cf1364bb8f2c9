"""16-byte vector loads and stores of four float32 values (``ld.global.v4.f32``).

Numba has no vector load for a float32 array. These intrinsics emit a plain LLVM load
(or store) of ``<4 x float>`` with 16-byte alignment through a global-address-space
pointer, which NVPTX lowers to ``ld.global.v4.f32`` / ``st.global.v4.f32``: one
instruction moves four values, so a warp moves 512 contiguous bytes per instruction.
No inline assembly in the plain forms: the compiler still schedules and combines them freely.

Two forms: ``load_quad(x, row, col)`` / ``store_quad(y, row, col, a, b, c, d)`` for the
2-D row arrays of Experiment A, ``load_quad_at_hinted(x, i, policy)`` /
``store_quad_at_hinted(y, i, a, b, c, d, policy)`` for the packed 1-D arrays of Experiment B,
which also carry an L2 cache policy (``l2_policy_evict_last()``, ``l2_policy_evict_first()``:
``createpolicy``, inline PTX, like the ordering primitives) so that x's lines outlive the
bytes that are not read again.

Contract (checked by the caller, not here): the addressed element is 16-byte aligned,
i.e. the array base is 16-byte aligned (every device allocation is 256-byte aligned)
and the element index is a multiple of 4 -- for rows: ``col % 4 == 0`` and a row length
that is a multiple of 4 (the launcher checks); for tiles: a tile start that is a multiple
of 4 (the tile tasks test it per tile). The simulator has no intrinsics: there the
callers always take the scalar path and these names are never called.
``load_packed_quad`` / ``store_packed_quad``: the raw forms for the packed rows of :mod:`.auto_narrow`, four
elements in memory order from ``x[row, col]`` on, across rows of fewer than four (C-contiguous arrays, the quad's
address aligned as the raw forms'; the launcher checks both). ``put_quad(values, k, a, b, c, d)`` keeps a loaded
quad in a thread's local array (plain stores); ``make_store_quotients`` writes a thread's quads of a row divided by
its sum (16-byte or masked scalar stores).
"""

import numpy as np
from numba import cuda, uint64

from ..numerics import KERNEL_OPTIONS, QUAD, SIMULATOR


@cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
def put_quad(values, k, a, b, c, d):
    """``values[k:k + 4] = (a, b, c, d)``: a loaded quad into a thread's local array (held in registers)."""
    values[k] = a
    values[k + 1] = b
    values[k + 2] = c
    values[k + 3] = d


if SIMULATOR:

    def load_quad(x, row, col):
        raise RuntimeError("vector loads are not available in the simulator")

    def store_quad(y, row, col, a, b, c, d):
        raise RuntimeError("vector stores are not available in the simulator")

    # The raw forms run in the simulator element by element (the same elements, no alignment to check), so the
    # simulator runs the row kernels' head / aligned quads / tail logic.
    def load_raw_quad(x, row, col):
        return x[row, col], x[row, col + 1], x[row, col + 2], x[row, col + 3]

    def store_raw_quad(y, row, col, a, b, c, d):
        y[row, col], y[row, col + 1], y[row, col + 2], y[row, col + 3] = a, b, c, d

    # The packed forms read and write in memory order from x[row, col] on (a C-contiguous array): a quad of
    # rows narrower than four elements runs on into the next rows, as the GPU's one vector access does.
    def load_packed_quad(x, row, col):
        cols = x.shape[1]
        first = row * cols + col
        return tuple(x[(first + k) // cols, (first + k) % cols] for k in range(4))

    def store_packed_quad(y, row, col, a, b, c, d):
        cols = y.shape[1]
        first = row * cols + col
        for k, value in enumerate((a, b, c, d)):
            y[(first + k) // cols, (first + k) % cols] = value

    def address_of(x, row, col):
        return np.uint64(x.ctypes.data + int(row) * x.strides[0] + int(col) * x.strides[1])

    # L2 policies are hints: the simulator has no cache, and the hinted accesses are never called there.
    def l2_policy_evict_last():
        return 0

    def l2_policy_evict_first():
        return 0

    def load_quad_at_hinted(x, i, policy):
        raise RuntimeError("vector loads are not available in the simulator")

    def store_quad_at_hinted(y, i, a, b, c, d, policy):
        raise RuntimeError("vector stores are not available in the simulator")

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.core.errors import TypingError
    from numba.cuda.extending import intrinsic

    _GLOBAL = 1

    #: Element types of the raw quad accesses (bfloat16 arrays are uint16 arrays).
    _RAW_TYPES = (types.float32, types.float16, types.uint16, types.float64)

    def _check(name, array, *indices, dtypes=(types.float32,)):
        ndim = len(indices)
        if not (isinstance(array, types.Array) and array.ndim == ndim and array.dtype in dtypes):
            raise TypingError(f"{name}: expected a {ndim}-D array of {[str(t) for t in dtypes]}, got {array}")
        if not all(isinstance(index, types.Integer) for index in indices):
            raise TypingError(f"{name}: expected integer indices, got {indices}")

    def _check_values(name, values):
        for value in values:
            if value != types.float32:
                raise TypingError(f"{name}: expected float32 values, got {value}")

    def _element_pointer(context, builder, array_type, array, index_types, indices):
        ary = context.make_array(array_type)(context, builder, value=array)
        idx = [context.cast(builder, v, t, types.intp) for t, v in zip(index_types, indices, strict=True)]
        return cgutils.get_item_pointer(context, builder, array_type, ary, idx, wraparound=False)

    def _quad_pointer(context, builder, array_type, array, index_types, indices):
        ptr = _element_pointer(context, builder, array_type, array, index_types, indices)
        quad = ir.VectorType(context.get_value_type(array_type.dtype), 4)
        return builder.addrspacecast(builder.bitcast(ptr, quad.as_pointer()), quad.as_pointer(_GLOBAL))

    def _quad_alignment(array_type):
        """Bytes a quad's address is aligned to: 16 (float32, float64: two 16-byte halves), 8 (2-byte types)."""
        return min(16, 4 * array_type.dtype.bitwidth // 8)

    def _load_codegen(context, builder, sig, args):
        """Load the 4 elements at the indexed one in one vector access; return them as a 4-tuple."""
        ndim = sig.args[0].ndim
        ptr = _quad_pointer(context, builder, sig.args[0], args[0], sig.args[1:1 + ndim], args[1:1 + ndim])
        vec = builder.load(ptr, align=_quad_alignment(sig.args[0]))
        lanes = [builder.extract_element(vec, ir.Constant(ir.IntType(32), k)) for k in range(4)]
        return context.make_tuple(builder, sig.return_type, lanes)

    def _store_codegen(context, builder, sig, args):
        """Store the last four arguments at the indexed element in one vector access."""
        ndim = sig.args[0].ndim
        ptr = _quad_pointer(context, builder, sig.args[0], args[0], sig.args[1:1 + ndim], args[1:1 + ndim])
        vec = ir.Constant(ptr.type.pointee, ir.Undefined)
        for k in range(4):
            vec = builder.insert_element(vec, args[1 + ndim + k], ir.Constant(ir.IntType(32), k))
        builder.store(vec, ptr, align=_quad_alignment(sig.args[0]))
        return context.get_dummy_value()

    _QUAD_TUPLE = types.UniTuple(types.float32, 4)

    @intrinsic
    def load_quad(typingctx, x, row, col):
        """(x[row, col], x[row, col+1], x[row, col+2], x[row, col+3]) in one 16-byte load."""
        _check("load_quad", x, row, col)
        return _QUAD_TUPLE(x, row, col), _load_codegen

    @intrinsic
    def store_quad(typingctx, y, row, col, a, b, c, d):
        """y[row, col:col+4] = (a, b, c, d) in one 16-byte store."""
        _check("store_quad", y, row, col)
        _check_values("store_quad", (a, b, c, d))
        return types.void(y, row, col, a, b, c, d), _store_codegen


    @intrinsic
    def load_raw_quad(typingctx, x, row, col):
        """(x[row, col], ..., x[row, col+3]) of a float32, float16, uint16 (bfloat16) or float64 array in one
        vector access (16, 8, 8 or 2 x 16 bytes); the quad's address is aligned to that size (16 for float64)."""
        _check("load_raw_quad", x, row, col, dtypes=_RAW_TYPES)
        return types.UniTuple(x.dtype, 4)(x, row, col), _load_codegen

    @intrinsic
    def store_raw_quad(typingctx, y, row, col, a, b, c, d):
        """y[row, col:col+4] = (a, b, c, d), elements of y's type, in one vector access (as load_raw_quad)."""
        _check("store_raw_quad", y, row, col, dtypes=_RAW_TYPES)
        for value in (a, b, c, d):
            if value != y.dtype:
                raise TypingError(f"store_raw_quad: expected {y.dtype} values, got {value}")
        return types.void(y, row, col, a, b, c, d), _store_codegen

    #: On a GPU a packed quad is the raw quad's one vector access from x[row, col]: in a C-contiguous array
    #: of rows narrower than four elements it runs on into the next rows (the launcher checks the layout).
    load_packed_quad = load_raw_quad
    store_packed_quad = store_raw_quad

    @intrinsic
    def address_of(typingctx, x, row, col):
        """The address of x[row, col] (an integer): a kernel reads a row's alignment from it."""
        _check("address_of", x, row, col, dtypes=_RAW_TYPES)

        def codegen(context, builder, sig, args):
            ptr = _element_pointer(context, builder, sig.args[0], args[0], sig.args[1:3], args[1:3])
            return builder.ptrtoint(ptr, ir.IntType(64))

        return types.uint64(x, row, col), codegen

    def _policy(priority):
        """``createpolicy.fractional.L2::<priority>.b64``: a 64-bit L2 cache policy for every access it is passed to."""

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.IntType(64), [])
            asm = ir.InlineAsm(fnty, f"createpolicy.fractional.L2::{priority}.b64 $0, 1.0;", "=l", side_effect=False)
            return builder.call(asm, [])

        return codegen

    @intrinsic
    def l2_policy_evict_last(typingctx):
        """An L2 policy that keeps the lines it touches past the evict-normal ones (data read again soon)."""
        return types.uint64(), _policy("evict_last")

    @intrinsic
    def l2_policy_evict_first(typingctx):
        """An L2 policy that evicts the lines it touches first (data not read again)."""
        return types.uint64(), _policy("evict_first")

    def _global_address(context, builder, sig, args):
        """The indexed element's global-space address, as the 64-bit operand inline PTX takes."""
        ptr = _quad_pointer(context, builder, sig.args[0], args[0], sig.args[1:2], args[1:2])
        return builder.ptrtoint(ptr, ir.IntType(64))

    @intrinsic
    def load_quad_at_hinted(typingctx, x, i, policy):
        """(x[i], x[i+1], x[i+2], x[i+3]) of a 1-D array in one 16-byte load with an L2 cache policy
        (``ld.global.L2::cache_hint.v4.f32``)."""
        _check("load_quad_at_hinted", x, i)

        def codegen(context, builder, sig, args):
            address = _global_address(context, builder, sig, args)
            quad = ir.LiteralStructType([ir.FloatType()] * 4)
            fnty = ir.FunctionType(quad, [ir.IntType(64), ir.IntType(64)])
            asm = ir.InlineAsm(fnty, "ld.global.L2::cache_hint.v4.f32 {$0, $1, $2, $3}, [$4], $5;",
                               "=f,=f,=f,=f,l,l", side_effect=False)
            value = builder.call(asm, [address, context.cast(builder, args[2], sig.args[2], types.uint64)])
            lanes = [builder.extract_value(value, k) for k in range(4)]
            return context.make_tuple(builder, sig.return_type, lanes)

        return _QUAD_TUPLE(x, i, policy), codegen

    @intrinsic
    def store_quad_at_hinted(typingctx, y, i, a, b, c, d, policy):
        """y[i:i+4] = (a, b, c, d) of a 1-D array in one 16-byte store with an L2 cache policy
        (``st.global.L2::cache_hint.v4.f32``)."""
        _check("store_quad_at_hinted", y, i)
        _check_values("store_quad_at_hinted", (a, b, c, d))

        def codegen(context, builder, sig, args):
            address = _global_address(context, builder, sig, args)
            fnty = ir.FunctionType(ir.VoidType(), [ir.IntType(64)] + [ir.FloatType()] * 4 + [ir.IntType(64)])
            asm = ir.InlineAsm(fnty, "st.global.L2::cache_hint.v4.f32 [$0], {$1, $2, $3, $4}, $5;",
                               "l,f,f,f,f,l", side_effect=True)
            builder.call(asm, [address] + list(args[2:6]) + [context.cast(builder, args[6], sig.args[6], types.uint64)])
            return context.get_dummy_value()

        return types.void(y, i, a, b, c, d, policy), codegen


def make_store_quotients(quads, stride, vector, div):
    """``store_quotients(y, row, cols, first, values, divisor)``: a thread's ``quads`` quads divided by ``divisor``
    into row ``row`` of ``y``, quad ``q`` (``values[4q:4q + 4]``) at column ``first + stride * q``, columns past
    ``cols`` skipped; 16-byte stores when ``vector`` (rows a multiple of 4), else masked scalar ones."""
    QUADS = quads
    STRIDE = stride
    VECTOR = vector
    DIV = div

    @cuda.jit(device=True, inline="always", **KERNEL_OPTIONS)
    def store_quotients(y, row, cols, first, values, divisor):
        for q in range(QUADS):
            base = first + STRIDE * q
            if VECTOR:
                if base < cols:
                    store_quad(y, row, base, DIV(values[QUAD * q], divisor), DIV(values[QUAD * q + 1], divisor),
                               DIV(values[QUAD * q + 2], divisor), DIV(values[QUAD * q + 3], divisor))
            else:
                for j in range(QUAD):
                    if base + j < cols:
                        y[uint64(row), uint64(base + j)] = DIV(values[QUAD * q + j], divisor)

    return store_quotients
