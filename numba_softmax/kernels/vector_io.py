"""16-byte vector loads and stores of four float32 values (``ld.global.v4.f32``).

Numba has no vector load for a float32 array. These intrinsics emit a plain LLVM load
(or store) of ``<4 x float>`` with 16-byte alignment through a global-address-space
pointer, which NVPTX lowers to ``ld.global.v4.f32`` / ``st.global.v4.f32``: one
instruction moves four values, so a warp moves 512 contiguous bytes per instruction.
No inline assembly: the compiler still schedules and combines them freely.

Contract (checked by the launcher, not here): ``x[row, col]`` is 16-byte aligned, i.e.
the array base is 16-byte aligned, ``col % 4 == 0`` and the row length is a multiple
of 4 (so every row starts aligned). The simulator has no intrinsics: there the
launcher always picks the scalar path and these names are never called.
"""

from ..numerics import SIMULATOR

if SIMULATOR:

    def load_quad(x, row, col):
        raise RuntimeError("vector loads are not available in the simulator")

    def store_quad(y, row, col, a, b, c, d):
        raise RuntimeError("vector stores are not available in the simulator")

else:
    from llvmlite import ir
    from numba import types
    from numba.cuda import cgutils
    from numba.cuda.core.errors import TypingError
    from numba.cuda.extending import intrinsic

    _GLOBAL = 1
    _QUAD = ir.VectorType(ir.FloatType(), 4)

    def _check(name, array, row, col):
        if not (isinstance(array, types.Array) and array.ndim == 2 and array.dtype == types.float32):
            raise TypingError(f"{name}: expected a 2-D float32 array, got {array}")
        if not (isinstance(row, types.Integer) and isinstance(col, types.Integer)):
            raise TypingError(f"{name}: expected integer indices, got {row}, {col}")

    def _quad_pointer(context, builder, array_type, array, index_types, indices):
        ary = context.make_array(array_type)(context, builder, value=array)
        idx = [context.cast(builder, v, t, types.intp) for t, v in zip(index_types, indices, strict=True)]
        ptr = cgutils.get_item_pointer(context, builder, array_type, ary, idx, wraparound=False)
        return builder.addrspacecast(builder.bitcast(ptr, _QUAD.as_pointer()), _QUAD.as_pointer(_GLOBAL))

    @intrinsic
    def load_quad(typingctx, x, row, col):
        """(x[row, col], x[row, col+1], x[row, col+2], x[row, col+3]) in one 16-byte load."""
        _check("load_quad", x, row, col)
        quad = types.UniTuple(types.float32, 4)

        def codegen(context, builder, sig, args):
            ptr = _quad_pointer(context, builder, sig.args[0], args[0], sig.args[1:], args[1:])
            vec = builder.load(ptr, align=16)
            lanes = [builder.extract_element(vec, ir.Constant(ir.IntType(32), k)) for k in range(4)]
            return context.make_tuple(builder, quad, lanes)

        return quad(x, row, col), codegen

    @intrinsic
    def store_quad(typingctx, y, row, col, a, b, c, d):
        """y[row, col:col+4] = (a, b, c, d) in one 16-byte store."""
        _check("store_quad", y, row, col)
        for value in (a, b, c, d):
            if value != types.float32:
                raise TypingError(f"store_quad: expected float32 values, got {value}")

        def codegen(context, builder, sig, args):
            ptr = _quad_pointer(context, builder, sig.args[0], args[0], sig.args[1:3], args[1:3])
            vec = ir.Constant(_QUAD, ir.Undefined)
            for k in range(4):
                vec = builder.insert_element(vec, args[3 + k], ir.Constant(ir.IntType(32), k))
            builder.store(vec, ptr, align=16)
            return context.get_dummy_value()

        return types.void(y, row, col, a, b, c, d), codegen
