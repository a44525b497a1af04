"""Generated protobuf bindings of proto/et_def.proto (`make proto`); never edit et_def_pb2.py."""
