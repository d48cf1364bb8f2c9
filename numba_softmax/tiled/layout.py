"""Experiment B's packed layout: rows of any lengths back to back, cut into tiles (numpy only).

:mod:`numba_softmax.kernels.tiles` says what each array means on the device.
"""

from dataclasses import dataclass

import numpy as np

from ..cases import TILE_ELEMENTS
from ..kernels.tiles import MAX_TILE_ELEMENTS, TILE_THREADS, TILE_VALUES
from ..validation import validate_row_lengths

_INT32_MAX = np.iinfo(np.int32).max

@dataclass(frozen=True, eq=False)
class TiledLayout:
    """Packed rows cut into tiles. All arrays are C-contiguous numpy arrays."""
    tile_elements: int
    row_lengths: np.ndarray     # int64[rows]
    row_offsets: np.ndarray     # int64[rows + 1]
    tile_row: np.ndarray        # int32[n_tiles]
    tile_start: np.ndarray      # int64[n_tiles], offset into the packed values
    tile_len: np.ndarray        # int32[n_tiles], tile_elements except a row's last tile
    row_first_tile: np.ndarray  # int32[rows]
    row_tile_count: np.ndarray  # int32[rows]

    @property
    def rows(self):
        return int(self.row_lengths.size)

    @property
    def n_tiles(self):
        return int(self.tile_row.size)

    @property
    def total_elements(self):
        return int(self.row_offsets[-1])

    @property
    def fifo_capacity(self):
        """Every B and every C tile, once: the FIFO's size (its entries with one C tile each)."""
        return self.rows + self.n_tiles

    def fifo_entries(self, c_tiles):
        """FIFO entries of a DAG invocation whose C entries hold ``c_tiles`` consecutive tiles of a row
        (1 or 2, :func:`numba_softmax.queue.tiles_per_claim`): every B, and each row's tiles in runs of
        ``c_tiles`` (the row's last run may be shorter)."""
        counts = self.row_tile_count.astype(np.int64)
        return self.rows + int(((counts + c_tiles - 1) // c_tiles).sum())

    def c_entry_tiles(self, c_tiles):
        """The first tile of every C entry, in tile order (``c_tiles`` as :meth:`fifo_entries`)."""
        offset = np.arange(self.n_tiles, dtype=np.int64) - self.row_first_tile[self.tile_row]
        return np.flatnonzero(offset % c_tiles == 0)


def build_layout(row_lengths, tile_elements=TILE_ELEMENTS):
    """Cut packed rows into tiles of ``tile_elements`` (the last tile of a row masked)."""
    tile_elements = int(tile_elements)
    if not 1 <= tile_elements <= MAX_TILE_ELEMENTS:
        raise ValueError(f"tile_elements must be in [1, {MAX_TILE_ELEMENTS}] "
                         f"({TILE_THREADS} threads x {TILE_VALUES} values), got {tile_elements}")
    lengths = validate_row_lengths(row_lengths)
    rows = lengths.size
    row_offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=row_offsets[1:])
    counts = (lengths + tile_elements - 1) // tile_elements
    n_tiles = int(counts.sum())
    if rows + n_tiles > _INT32_MAX:
        raise ValueError(f"{rows} rows + {n_tiles} tiles exceed the int32 task ids")
    first = np.zeros(rows, dtype=np.int64)
    np.cumsum(counts[:-1], out=first[1:])
    tile_row = np.repeat(np.arange(rows, dtype=np.int64), counts)
    index_in_row = np.arange(n_tiles, dtype=np.int64) - first[tile_row]
    tile_start = row_offsets[tile_row] + index_in_row * tile_elements
    tile_len = np.minimum(tile_elements, row_offsets[tile_row + 1] - tile_start)
    layout = TiledLayout(
        tile_elements=tile_elements,
        row_lengths=lengths,
        row_offsets=row_offsets,
        tile_row=tile_row.astype(np.int32),
        tile_start=tile_start.astype(np.int64),
        tile_len=tile_len.astype(np.int32),
        row_first_tile=first.astype(np.int32),
        row_tile_count=counts.astype(np.int32),
    )
    check_layout(layout)
    return layout


def check_layout(layout):
    """Structural invariants of a layout (raises ``AssertionError`` naming the broken one)."""
    lay = layout
    rows, n_tiles = lay.rows, lay.n_tiles
    expect = {"tile_row": (np.int32, n_tiles), "tile_start": (np.int64, n_tiles),
              "tile_len": (np.int32, n_tiles), "row_first_tile": (np.int32, rows),
              "row_tile_count": (np.int32, rows), "row_offsets": (np.int64, rows + 1)}
    for name, (dtype, size) in expect.items():
        arr = getattr(lay, name)
        if arr.dtype != dtype or arr.shape != (size,) or not arr.flags.c_contiguous:
            raise AssertionError(f"layout.{name}: expected contiguous {np.dtype(dtype)}[{size}], "
                                 f"got {arr.dtype}{list(arr.shape)}")
    if not np.all(lay.tile_len >= 1) or not np.all(lay.tile_len <= lay.tile_elements):
        raise AssertionError("layout.tile_len outside [1, tile_elements]")
    if int(lay.row_tile_count.sum()) != n_tiles:
        raise AssertionError("row_tile_count does not sum to n_tiles")
    # Tiles of a row are consecutive ids, in row order, covering the row exactly.
    if not np.array_equal(lay.tile_row, np.repeat(np.arange(rows, dtype=np.int32), lay.row_tile_count)):
        raise AssertionError("tile ids of a row are not consecutive / in row order")
    if not np.array_equal(lay.row_first_tile[1:], np.cumsum(lay.row_tile_count)[:-1]) or (
            rows and lay.row_first_tile[0] != 0):
        raise AssertionError("row_first_tile is not the prefix sum of row_tile_count")
    ends = lay.tile_start + lay.tile_len
    if n_tiles and (lay.tile_start[0] != 0 or not np.array_equal(lay.tile_start[1:], ends[:-1])):
        raise AssertionError("tiles do not cover the packed values back to back")
    last = lay.row_first_tile + lay.row_tile_count - 1
    if not np.array_equal(ends[last], lay.row_offsets[1:]):
        raise AssertionError("a row's last tile does not end at the row's end")
    full = np.ones(n_tiles, dtype=bool)
    full[last] = False
    if not np.all(lay.tile_len[full] == lay.tile_elements):
        raise AssertionError("a tile other than a row's last is not full")
    return True
