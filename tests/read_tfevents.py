#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, for the tests: pure Python (no
TensorFlow, no protobuf, no crc32c package), so that it shares nothing with the C++ writer.

    read_tfevents.py FILE...   prints one JSON object per file:
      {"path": ..., "file_version": ..., "events": [{"step": S, "wall_time": T, "values": {tag: v}}]}

Every record's framing is checked (both masked CRC-32C, the length) and the file must end
at a record's end; any fault exits non-zero naming the file and offset.
"""
import json
import struct
import sys


def crc32c(data):
    # Bit by bit, straight from the definition (reflected Castagnoli polynomial 0x82F63B78):
    # slow, and unlike the C++ table.
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(data, at):
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(data):
    """(field number, wire type, value) of a serialized message: ints for varints, bytes for
    fixed32/fixed64/length-delimited."""
    at = 0
    out = []
    while at < len(data):
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = varint(data, at)
        elif wire == 1:
            value, at = data[at:at + 8], at + 8
        elif wire == 5:
            value, at = data[at:at + 4], at + 4
        elif wire == 2:
            size, at = varint(data, at)
            value, at = data[at:at + size], at + size
        else:
            raise ValueError(f"wire type {wire} of field {number}")
        if at > len(data):
            raise ValueError("field runs past the message")
        out.append((number, wire, value))
    return out


def records(path):
    data = open(path, "rb").read()
    at = 0
    while at < len(data):
        if at + 12 > len(data):
            raise ValueError(f"{path}: truncated header at {at}")
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (header_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        if header_crc != masked(crc32c(header)):
            raise ValueError(f"{path}: bad length CRC at {at}")
        body = data[at + 12:at + 12 + length]
        if len(body) != length or at + 16 + length > len(data):
            raise ValueError(f"{path}: truncated record at {at}")
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        if body_crc != masked(crc32c(body)):
            raise ValueError(f"{path}: bad data CRC at {at}")
        yield body
        at += 16 + length


def event(body):
    out = {"step": 0, "values": {}}
    for number, wire, value in fields(body):
        if number == 1 and wire == 1:
            out["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            out["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and wire == 2:
            out["file_version"] = value.decode()
        elif number == 5 and wire == 2:
            for n, w, v in fields(value):
                assert n == 1 and w == 2, "Summary has only repeated Value value = 1"
                tag, simple = None, None
                for vn, vw, vv in fields(v):
                    if vn == 1 and vw == 2:
                        tag = vv.decode()
                    elif vn == 2 and vw == 5:
                        simple = struct.unpack("<f", vv)[0]
                assert tag is not None and simple is not None, "a Value without tag or simple_value"
                out["values"][tag] = simple
        else:
            raise ValueError(f"unexpected Event field {number} (wire type {wire})")
    return out


for path in sys.argv[1:]:
    events = [event(body) for body in records(path)]
    if not events or "file_version" not in events[0]:
        raise SystemExit(f"{path}: the first event has no file_version")
    print(json.dumps({"path": path, "file_version": events[0]["file_version"], "events": events[1:]}))
