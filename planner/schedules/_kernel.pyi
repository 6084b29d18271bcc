from array import array

def run(
    ops: array[int],
    dur: array[float],
    lag: array[float],
    pp: int,
    start: array[float],
    end: array[float],
    busy: array[float],
) -> float: ...
def critical(
    ops: array[int],
    dur: array[float],
    lag: array[float],
    pp: int,
    num_stages: int,
    counts: array[int],
    xs: array[int],
) -> float: ...
def build(
    codes: array[int],
    offsets: array[int],
    pp: int,
    num_stages: int,
    m: int,
    rank_of: array[int],
    ops_out: array[int],
    pos_out: array[int],
    peak_out: array[int],
) -> int: ...
def prepare(ops: array[int], pp: int) -> object: ...
def makespan(handle: object, dur: array[float], lag: array[float], busy: array[float]) -> float: ...
def critical_prepared(
    handle: object,
    dur: array[float],
    lag: array[float],
    num_stages: int,
    counts: array[int],
    xs: array[int],
) -> float: ...
def held_points(
    codes: array[int], offsets: array[int], pp: int, num_stages: int, rank_of: array[int]
) -> bytes: ...
def seed_paths(ops: array[int], pp: int, num_stages: int, out: array[int]) -> int: ...
