#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tools/fuzz/corpus/<target>/):
valid inputs of each format, from which the fuzzers mutate. Rerun after a
format changes: /usr/bin/python3 tools/fuzz/make_seeds.py (needs protoc and
Debian's python3-protobuf for the rendezvous messages)."""
import importlib.util
import os
import struct
import subprocess
import tempfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tools", "fuzz", "corpus")


def write(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def requests():
    out = tempfile.mkdtemp()
    subprocess.run(["protoc", "-I", ROOT, "--python_out", out, "proto/rendezvous.proto"], check=True)
    # Loaded from its file (it imports only protobuf's own modules).
    spec = importlib.util.spec_from_file_location("rendezvous_pb2", os.path.join(out, "proto", "rendezvous_pb2.py"))
    pb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pb)
    opts = pb.RunOptions(min_nodes=1, max_nodes=4, last_call_timeout_s=1, keep_alive_interval_s=1,
                         keep_alive_max_attempt=2)
    for i, node in enumerate(["a", "b", "c"]):
        j = pb.JoinRequest(run_id="fuzz", node=pb.NodeInfo(node_id=node, host="10.0.0.%d" % (i + 1),
                                                          local_world_size=2, static_node_rank=-1,
                                                          free_port=29500 + i), options=opts, last_round=0)
        write("request_fuzz", "join-%s" % node, bytes([0]) + j.SerializeToString())
    a = pb.Assignment(round=1, group_rank=0, group_world_size=2, rank_offset=0, world_size=4,
                      master_addr="10.0.0.1", master_port=29500)
    a.participants.add(node_id="a", host="10.0.0.1", group_rank=0, local_world_size=2, rank_offset=0)
    a.participants.add(node_id="b", host="10.0.0.2", group_rank=1, local_world_size=2, rank_offset=2)
    ka = pb.KeepAliveRequest(run_id="fuzz", node_id="a", assignment=a, restart_count=0, options=opts)
    ka.progress.add(rank=0, local_rank=0, epoch=1, step=10, loss=0.5)
    write("request_fuzz", "keepalive", bytes([1]) + ka.SerializeToString())
    write("request_fuzz", "leave", bytes([2]) + pb.LeaveRequest(run_id="fuzz", node_id="b", reason="done")
          .SerializeToString())
    write("request_fuzz", "watch", bytes([3]) + pb.WatchRequest(run_id="fuzz", node_id="a", round=1)
          .SerializeToString())
    ms = pb.MultiSetRequest(scope=pb.Scope(run_id="fuzz", round=1))
    ms.entries.add(key="nccl/id", value=b"x" * 128)
    write("request_fuzz", "multiset", bytes([4]) + ms.SerializeToString())
    write("request_fuzz", "tick", bytes([5]))


def cli():
    write("cli_fuzz", "standalone", "--standalone\n--nproc_per_node=4\ntrain\n--epochs\n1")
    write("cli_fuzz", "multinode", "--nnodes=1:4\n--nproc-per-node=gpu\n--rdzv_backend=c10d\n"
          "--rdzv_endpoint=[::1]:29400\n--rdzv_conf=join_timeout=30,is_host=yes,store_type=tcp\n"
          "--max_restarts=3\n--tee=0:1,1:3\n--numa_binding=exclusive\ntrain.py")
    write("cli_fuzz", "static", "--nnodes=2\n--node_rank=1\n--master_addr=10.0.0.1\n--master_port=29500\n-m\npkg.mod")
    write("cli_fuzz", "slurm", "--nproc=2\nPET_RDZV_ID=job\nSLURM_JOB_ID=42\nSLURM_STEP_ID=0\n"
          "SLURM_JOB_NODELIST=node[01-04,07],gpu-a\nSLURM_NNODES=5\ntrain")
    write("cli_fuzz", "status", "status\n--rdzv_endpoint\nhost:29400\n--rdzv_id\njob")
    write("cli_fuzz", "cpulist", "0-3,8,10-11")


def error_file():
    write("error_file_fuzz", "nested", '{"message": {"message": "RuntimeError: boom", "extraInfo": '
          '{"py_callstack": "Traceback ...", "timestamp": "1700000000"}}}')
    write("error_file_fuzz", "flat", '{"message": "ValueError: x \\u00e9 \\"q\\""}')
    write("error_file_fuzz", "escapes", '{"message": {"message": "a\\nb\\tc\\\\", "extraInfo": {}}}')


def file_timer():
    write("file_timer_fuzz", "acquire", '{"version": 1, "pid": 4242, "scope_id": "train.py#17", '
          '"expiration_time": 1701939123.25, "signal": 9}')
    write("file_timer_fuzz", "release", '{"version": 1, "pid": 4242, "scope_id": "train.py#17", '
          '"expiration_time": -1, "signal": 0}')


def idx():
    images = struct.pack(">IIII", 0x00000803, 2, 3, 3) + bytes(range(18))
    labels = struct.pack(">II", 0x00000801, 3) + bytes([1, 2, 9])
    write("idx_fuzz", "images", images)
    write("idx_fuzz", "labels", labels)


def checkpoint():
    def name(s):
        return struct.pack("<I", len(s)) + s.encode()
    payload = struct.pack("<I", 2) + name("step") + struct.pack("<q", 64) + name("epoch") + struct.pack("<q", 1)
    payload += struct.pack("<I", 1) + name("lr") + struct.pack("<d", 0.001)
    payload += struct.pack("<I", 1) + name("w") + struct.pack("<I", 2) + struct.pack("<qq", 2, 2)
    payload += struct.pack("<Q", 4) + struct.pack("<4f", 1, 2, 3, 4)
    data = b"CPTRCKPT" + struct.pack("<IQ", 1, len(payload)) + payload
    data += struct.pack("<I", zlib.crc32(payload) & 0xffffffff)
    write("checkpoint_fuzz", "valid", data)
    # Version 2: a string table between the reals and the tensors.
    ints = struct.pack("<I", 1) + name("step") + struct.pack("<q", 64)
    reals = struct.pack("<I", 0)
    strings = struct.pack("<I", 1) + name("optimizer") + name("lars")
    tensors = struct.pack("<I", 1) + name("lars.momentum.0") + struct.pack("<I", 1) + struct.pack("<q", 2)
    tensors += struct.pack("<Q", 2) + struct.pack("<2f", 0.5, -0.5)
    payload = ints + reals + strings + tensors
    data = b"CPTRCKPT" + struct.pack("<IQ", 2, len(payload)) + payload
    data += struct.pack("<I", zlib.crc32(payload) & 0xffffffff)
    write("checkpoint_fuzz", "valid_v2", data)


if __name__ == "__main__":
    requests()
    cli()
    error_file()
    file_timer()
    idx()
    checkpoint()
    print("seeds written under", CORPUS)
