"""A Python client of proto/rendezvous.proto for hostile-client scenarios:
the messages compiled at run time by Debian's protoc into a temporary
folder, the calls made with grpcio's generic unary-unary stubs (no
generated service code needed)."""
import importlib
import os
import subprocess
import sys
import tempfile

import harness

SERVICE = "/cpptorchrun.rdzv.v1.Rendezvous/"


def load_messages():
    """The rendezvous_pb2 module, compiled from the project's proto."""
    proto = None
    for base in [os.path.join(harness.RUNFILES, harness.WORKSPACE), os.getcwd()]:
        if os.path.exists(os.path.join(base, "proto", "rendezvous.proto")):
            proto = base
            break
    if proto is None:
        raise FileNotFoundError("proto/rendezvous.proto not found in the runfiles")
    out = tempfile.mkdtemp(prefix="cpt-pb2-")
    subprocess.run(["protoc", "-I", proto, "--python_out", out, "proto/rendezvous.proto"], check=True)
    sys.path.insert(0, out)
    return importlib.import_module("proto.rendezvous_pb2")


class Client:
    """Calls one method by name: client.call("KeepAlive", request) returns
    (response or None, grpc.StatusCode, details)."""

    def __init__(self, endpoint, token=None):
        import grpc
        self.grpc = grpc
        self.pb = load_messages()
        self.channel = grpc.insecure_channel(endpoint)
        self.metadata = [("authorization", "Bearer " + token)] if token else []

    def call(self, method, request, timeout=10):
        response_type = getattr(self.pb, {"RunStatus": "RunStatusResponse"}.get(method, method + "Response"))
        stub = self.channel.unary_unary(SERVICE + method, request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=response_type.FromString)
        try:
            return stub(request, timeout=timeout, metadata=self.metadata), self.grpc.StatusCode.OK, ""
        except self.grpc.RpcError as e:
            return None, e.code(), e.details()

    def close(self):
        self.channel.close()
