"""Generated protobuf and gRPC stubs for the kubelet pod-resources API (committed, so nodes
need no grpcio-tools). Importing them needs grpcio and protobuf: the agent does so only when
``--kubelet-socket`` is given."""
