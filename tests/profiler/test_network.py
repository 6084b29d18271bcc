"""Network profiler: nccl-tests bandwidth definitions, rank groups, and real 2-rank gloo runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from api.cli import app
from planner.specs import ClusterSpec
from profiler.network import NetworkProfile, _scopes, bus_bandwidth

ROOT = Path(__file__).resolve().parents[2]


def test_bus_bandwidth_follows_nccl_tests() -> None:
    # nccl-tests doc/PERFORMANCE.md: algbw = S/t; busbw = algbw * 2(n-1)/n for all-reduce,
    # * (n-1)/n for all-gather and reduce-scatter, * 1 for send/recv.
    alg, bus = bus_bandwidth("all_reduce", size_bytes=8_000_000_000, time_s=2.0, ranks=8)
    assert alg == pytest.approx(4.0)  # 8e9 bytes in 2 s = 4 GB/s
    assert bus == pytest.approx(4.0 * 14 / 8)
    _, bus = bus_bandwidth("all_gather", size_bytes=4_000_000_000, time_s=1.0, ranks=4)
    assert bus == pytest.approx(4.0 * 3 / 4)
    _, bus = bus_bandwidth("reduce_scatter", size_bytes=2_000_000_000, time_s=1.0, ranks=2)
    assert bus == pytest.approx(1.0)
    assert bus_bandwidth("send_recv", size_bytes=10**9, time_s=0.5, ranks=2) == (2.0, 2.0)


def test_scopes_group_nodes_and_leaders() -> None:
    assert _scopes(8, 4) == [
        ("intra_node", [[0, 1, 2, 3], [4, 5, 6, 7]]),
        ("inter_node", [[0, 4]]),
    ]
    assert _scopes(2, 2) == [("intra_node", [[0, 1]])]
    assert _scopes(2, 1) == [("inter_node", [[0, 1]])]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def test_torchrun_two_gloo_ranks_give_intra_node_links(tmp_path: Path) -> None:
    out = tmp_path / "net.json"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        "-m", "profiler.network", "-o", str(out), "--backend", "gloo",
        "--sizes", "1k,64k", "--iters", "3", "--repeats", "2", "--gpu", "H100-SXM-80GB",
    ]  # fmt: skip
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    prof = NetworkProfile.model_validate_json(out.read_text())
    assert prof.backend == "gloo" and prof.world_size == 2 and prof.nnodes == 1
    # 4 ops x 2 sizes, all within the node
    assert len(prof.measurements) == 8
    assert {m.scope for m in prof.measurements} == {"intra_node"}
    assert {m.op for m in prof.measurements} == {
        "all_reduce", "all_gather", "reduce_scatter", "send_recv",
    }  # fmt: skip
    assert all(m.time_s > 0 and m.busbw_gbps > 0 for m in prof.measurements)
    links = prof.links
    assert links.intra_node_gbps == max(
        m.busbw_gbps for m in prof.measurements if m.op == "all_reduce"
    )
    assert links.intra_node_latency_s is not None and links.intra_node_latency_s > 0
    assert links.inter_node_gbps is None and links.inter_node_latency_s is None
    # the measured figures go into a ClusterSpec
    assert isinstance(prof.cluster, ClusterSpec)
    assert prof.cluster.intra_node_gbps == links.intra_node_gbps
    assert prof.cluster.num_gpus == 2 and prof.cluster.gpus_per_node == 2


@pytest.mark.slow
def test_cli_profile_network_across_pretend_nodes(tmp_path: Path) -> None:
    out = tmp_path / "net.json"
    result = CliRunner().invoke(
        app,
        [
            "profile-network",
            "--nproc-per-node",
            "2",
            "--ranks-per-node",
            "1",
            "--sizes",
            "4k",
            "--ops",
            "all_reduce,send_recv",
            "--iters",
            "2",
            "--repeats",
            "1",
            "--backend",
            "gloo",
            "-o",
            str(out),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc == json.loads(out.read_text())
    prof = NetworkProfile.model_validate(doc)
    assert prof.nnodes == 2 and prof.ranks_per_node == 1
    assert {(m.scope, m.op) for m in prof.measurements} == {
        ("inter_node", "all_reduce"),
        ("inter_node", "send_recv"),
    }
    assert prof.links.inter_node_gbps is not None and prof.links.inter_node_gbps > 0
    assert prof.links.intra_node_gbps is None


def test_cli_profile_network_rejects_multinode_without_endpoint() -> None:
    result = CliRunner().invoke(app, ["profile-network", "--nnodes", "2", "--json"])
    assert result.exit_code == 2
    assert "rdzv-endpoint" in result.output
