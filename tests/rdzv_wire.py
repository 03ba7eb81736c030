"""A Python client of proto/rendezvous.proto for hostile-client scenarios:
the messages compiled at run time by Debian's protoc into a temporary
folder, the calls made with grpcio's generic unary-unary stubs (no
generated service code needed)."""
import importlib.util
import os
import shutil
import subprocess
import tempfile

from tests import harness

SERVICE = "/cpptorchrun.rdzv.v1.Rendezvous/"


_messages = None


def load_messages():
    """The rendezvous_pb2 module, compiled from the project's proto (once a
    process: a second copy would register the proto file again)."""
    global _messages
    if _messages is not None:
        return _messages
    proto = None
    for base in [os.path.join(harness.RUNFILES, harness.WORKSPACE), os.getcwd()]:
        if os.path.exists(os.path.join(base, "proto", "rendezvous.proto")):
            proto = base
            break
    if proto is None:
        raise FileNotFoundError("proto/rendezvous.proto not found in the runfiles")
    out = tempfile.mkdtemp(prefix="cpt-pb2-")
    try:
        subprocess.run(["protoc", "-I", proto, "--python_out", out, "proto/rendezvous.proto"], check=True)
        _messages = load_generated(os.path.join(out, "proto", "rendezvous_pb2.py"))
    finally:
        # Loaded: the module lives on without its file; nothing is left in /tmp.
        shutil.rmtree(out, ignore_errors=True)
    return _messages


def load_generated(path):
    """A module protoc generated, loaded from its file: it imports only
    protobuf's own modules, so no search path needs to hold it."""
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
