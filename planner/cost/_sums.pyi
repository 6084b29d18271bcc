from array import array

def sums(
    layers: array[float],
    kinds: bytes,
    bounds: array[int],
    stage_rank: array[int],
    inflight: array[int],
    pp: int,
    of: float,
    ob: float,
    ow: float,
    fixed_bytes: float,
    out: array[float],
) -> None: ...
