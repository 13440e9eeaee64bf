"""An event-file reader independent of ropelab's writer, for tests/e2e/tensorboard.sh.

    python3 tfevents_read.py RUN_DIR            # prints the run's events as JSON

Reads RUN_DIR/tensorboard/events.out.tfevents.* in name order, as TensorBoard does:

- the TFRecord framing, each CRC-32C checked (a bitwise CRC written here, not ropelab's table);
- each record parsed by Debian's python3-protobuf, with message classes built from a schema of
  the fields of TensorBoard's event.proto, summary.proto, tensor.proto, tensor_shape.proto and
  the hparams plugin's plugin_data.proto that ropelab writes (field numbers and types as there);
- a SessionLog START after the first one drops the events logged before it at its step and
  after, as TensorBoard's event accumulator does for a restarted run; a scalar still logged
  twice at one step (TensorBoard would draw both points) is an error.

Prints {"scalars": {tag: {step: value}}, "texts": {tag: {step: text}}, "hparams": {...},
"session_end": status or null, "files": n, "records": n}.
"""
import glob
import json
import os
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf import struct_pb2  # noqa: F401 (puts struct.proto in the default pool)

F = descriptor_pb2.FieldDescriptorProto


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0
    while pos < len(buf):
        if len(buf) - pos < 12:
            return  # a last record cut short (a killed writer): TensorBoard skips it too
        header = buf[pos:pos + 8]
        (n,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", buf[pos + 8:pos + 12])
        if hcrc != masked(header):
            raise SystemExit(f"{path}: bad length CRC at byte {pos}")
        if len(buf) - pos < 16 + n:
            return
        data = buf[pos + 12:pos + 12 + n]
        (dcrc,) = struct.unpack("<I", buf[pos + 12 + n:pos + 16 + n])
        if dcrc != masked(data):
            raise SystemExit(f"{path}: bad data CRC at byte {pos}")
        yield data
        pos += 16 + n


def message(fd, name, fields, nested=()):
    m = fd.message_type.add() if fd is not None else descriptor_pb2.DescriptorProto()
    m.name = name
    for fname, num, ftype, label, tname in fields:
        f = m.field.add(name=fname, number=num, type=ftype, label=label)
        if tname:
            f.type_name = tname
    for n in nested:
        m.nested_type.add().CopyFrom(n)
    return m


def schema():
    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    fd = descriptor_pb2.FileDescriptorProto(name="tb_schema.proto", package="tb", syntax="proto3")
    fd.dependency.append("google/protobuf/struct.proto")
    message(fd, "Dim", [("size", 1, F.TYPE_INT64, opt, ""), ("name", 2, F.TYPE_STRING, opt, "")])
    message(fd, "TensorShapeProto", [("dim", 2, F.TYPE_MESSAGE, rep, ".tb.Dim")])
    message(fd, "TensorProto", [
        ("dtype", 1, F.TYPE_INT32, opt, ""),
        ("tensor_shape", 2, F.TYPE_MESSAGE, opt, ".tb.TensorShapeProto"),
        ("float_val", 5, F.TYPE_FLOAT, rep, ""),
        ("double_val", 6, F.TYPE_DOUBLE, rep, ""),
        ("string_val", 8, F.TYPE_BYTES, rep, "")])
    message(fd, "PluginData", [("plugin_name", 1, F.TYPE_STRING, opt, ""),
                               ("content", 2, F.TYPE_BYTES, opt, "")])
    message(fd, "SummaryMetadata", [("plugin_data", 1, F.TYPE_MESSAGE, opt, ".tb.PluginData"),
                                    ("data_class", 4, F.TYPE_INT32, opt, "")])
    message(fd, "Value", [("tag", 1, F.TYPE_STRING, opt, ""),
                          ("simple_value", 2, F.TYPE_FLOAT, opt, ""),
                          ("tensor", 8, F.TYPE_MESSAGE, opt, ".tb.TensorProto"),
                          ("metadata", 9, F.TYPE_MESSAGE, opt, ".tb.SummaryMetadata")])
    message(fd, "Summary", [("value", 1, F.TYPE_MESSAGE, rep, ".tb.Value")])
    message(fd, "SessionLog", [("status", 1, F.TYPE_INT32, opt, "")])
    message(fd, "Event", [("wall_time", 1, F.TYPE_DOUBLE, opt, ""),
                          ("step", 2, F.TYPE_INT64, opt, ""),
                          ("file_version", 3, F.TYPE_STRING, opt, ""),
                          ("summary", 5, F.TYPE_MESSAGE, opt, ".tb.Summary"),
                          ("session_log", 7, F.TYPE_MESSAGE, opt, ".tb.SessionLog")])
    entry = message(None, "HparamsEntry", [
        ("key", 1, F.TYPE_STRING, opt, ""),
        ("value", 2, F.TYPE_MESSAGE, opt, ".google.protobuf.Value")])
    entry.options.map_entry = True
    message(fd, "SessionStartInfo", [("hparams", 1, F.TYPE_MESSAGE, rep,
                                      ".tb.SessionStartInfo.HparamsEntry"),
                                     ("group_name", 4, F.TYPE_STRING, opt, ""),
                                     ("start_time_secs", 5, F.TYPE_DOUBLE, opt, "")], [entry])
    message(fd, "SessionEndInfo", [("status", 1, F.TYPE_INT32, opt, ""),
                                   ("end_time_secs", 2, F.TYPE_DOUBLE, opt, "")])
    message(fd, "HParamsPluginData", [
        ("version", 1, F.TYPE_INT32, opt, ""),
        ("session_start_info", 3, F.TYPE_MESSAGE, opt, ".tb.SessionStartInfo"),
        ("session_end_info", 4, F.TYPE_MESSAGE, opt, ".tb.SessionEndInfo")])
    pool = descriptor_pool.Default()
    pool.Add(fd)
    get = getattr(message_factory, "GetMessageClass", None)
    if get is None:  # protobuf < 4.22
        factory = message_factory.MessageFactory(pool)
        get = factory.GetPrototype
    return lambda name: get(pool.FindMessageTypeByName("tb." + name))


def value_of(v):
    kind = v.WhichOneof("kind")
    return None if kind in (None, "null_value") else getattr(v, kind)


def read(run_dir):
    cls = schema()
    Event, PluginData = cls("Event"), cls("HParamsPluginData")
    files = sorted(glob.glob(os.path.join(run_dir, "tensorboard", "events.out.tfevents.*")))
    events, starts, n = [], 0, 0
    for path in files:
        for data in records(path):
            n += 1
            e = Event.FromString(data)
            if e.HasField("session_log") and e.session_log.status == 1:
                starts += 1
                if starts > 1:  # a restart: what was logged at its step and after is dropped
                    events = [x for x in events if x.step < e.step]
                continue
            events.append(e)
    if not events or events[0].file_version != "brain.Event:2":
        raise SystemExit(f"{run_dir}: the first event does not name file_version brain.Event:2")
    out = {"scalars": {}, "texts": {}, "hparams": None, "session_end": None,
           "files": len(files), "records": n}
    for e in events:
        for v in e.summary.value:
            plugin = v.metadata.plugin_data.plugin_name
            if plugin == "scalars":
                if v.tensor.dtype != 2 or len(v.tensor.tensor_shape.dim) != 0:
                    raise SystemExit(f"{v.tag}: not a float64 scalar tensor")
                series = out["scalars"].setdefault(v.tag, {})
                if e.step in series:  # TensorBoard would show both points
                    raise SystemExit(f"{v.tag}: step {e.step} logged twice (not purged)")
                series[e.step] = v.tensor.double_val[0]
            elif plugin == "text":
                out["texts"].setdefault(v.tag, {})[e.step] = v.tensor.string_val[0].decode()
            elif plugin == "hparams":
                d = PluginData.FromString(v.metadata.plugin_data.content)
                if d.HasField("session_start_info"):
                    out["hparams"] = {k: value_of(x)
                                      for k, x in d.session_start_info.hparams.items()}
                if d.HasField("session_end_info"):
                    out["session_end"] = d.session_end_info.status
            else:
                raise SystemExit(f"{v.tag}: unexpected plugin {plugin!r}")
    return out


if __name__ == "__main__":
    r = read(sys.argv[1])
    r["scalars"] = {t: {str(s): v for s, v in d.items()} for t, d in r["scalars"].items()}
    r["texts"] = {t: {str(s): v for s, v in d.items()} for t, d in r["texts"].items()}
    json.dump(r, sys.stdout, indent=1)
    print()
