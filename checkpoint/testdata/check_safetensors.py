#!/usr/bin/env python3
"""Checks shardema's safetensors exports with the reference reader (huggingface/safetensors).

Usage: check_safetensors.py EXPECTED_JSON   (written by //checkpoint:export_py_fixture)

For every exported file: the Rust reader (safetensors.deserialize) must accept it; dtypes,
shapes and data bytes must equal the expected tensors, whose values are converted here from the
source bits independently (numpy for f16, integer round-to-nearest-even for bf16); the
__metadata__ must match; numpy-loadable files are also loaded with safetensors.numpy.load_file
and re-serialised with safetensors.numpy.save, which must give the same header (but for the
order of the metadata keys) and the same data bytes. For sharded
exports the index must map every tensor to its file and total_size must be the data size.
Exit 0 when everything matches, 1 otherwise; exit 0 with "SKIP" when safetensors is missing.
"""
import json
import os
import re
import struct
import sys

try:
    import numpy as np
    import safetensors
    from safetensors import safe_open
    from safetensors.numpy import load_file, save
except ImportError as e:  # optional dependency (tools/setup.sh installs it)
    print(f"SKIP: python safetensors/numpy not available ({e})")
    sys.exit(0)


def bf16_from_f32_bits(u32):
    lsb = (u32 >> 16) & 1
    return ((u32 + 0x7FFF + lsb) >> 16).astype(np.uint16)


def convert(source_bytes, source_dtype, target_dtype):
    if source_dtype == "F32":
        u32 = np.frombuffer(source_bytes, dtype="<u4")
    elif source_dtype == "BF16":
        u32 = np.frombuffer(source_bytes, dtype="<u2").astype(np.uint32) << 16
    else:
        raise ValueError(source_dtype)
    f32 = u32.view(np.float32)
    if target_dtype == "F32":
        return f32.astype("<f4").tobytes()
    if target_dtype == "F16":
        return f32.astype("<f2").tobytes()
    if target_dtype == "BF16":
        return bf16_from_f32_bits(u32.astype(np.uint64)).astype("<u2").tobytes()
    raise ValueError(target_dtype)


def check_export(exp, errors):
    want = {t["name"]: t for t in exp["tensors"]}
    seen = {}
    total = 0
    for path in exp["files"]:
        with open(path, "rb") as f:
            blob = f.read()
        n = struct.unpack("<Q", blob[:8])[0]
        if n % 8:
            errors.append(f"{path}: header length {n} is not a multiple of 8")
        try:
            tensors = safetensors.deserialize(blob)
        except Exception as e:  # the reference reader rejected the file
            errors.append(f"{path}: rejected by safetensors: {e}")
            continue
        with safe_open(path, framework="numpy") as f:
            md = f.metadata()
        if md != exp["metadata"]:
            errors.append(f"{path}: metadata {md} != {exp['metadata']}")
        for name, info in tensors:
            seen[name] = os.path.basename(path)
            t = want.get(name)
            if t is None:
                errors.append(f"{path}: unexpected tensor {name}")
                continue
            if info["dtype"] != exp["dtype"] or list(info["shape"]) != t["shape"]:
                errors.append(f"{path}: {name}: {info['dtype']}{info['shape']} != {exp['dtype']}{t['shape']}")
            expected = convert(bytes.fromhex(t["source_hex"]), t["source_dtype"], exp["dtype"])
            if bytes(info["data"]) != expected:
                errors.append(f"{path}: {name}: data differs from the expected values")
            total += len(info["data"])
        if exp["dtype"] in ("F32", "F16"):
            # Same bytes as the reference writer, apart from the order of the __metadata__ keys
            # (a hash map there): compare the headers without metadata, and the data buffers.
            ref = save(load_file(path))
            m = struct.unpack("<Q", ref[:8])[0]
            ours = re.sub(rb'"__metadata__":\{[^{}]*\},', b"", blob[8:8 + n]).rstrip(b" ")
            if ours != ref[8:8 + m].rstrip(b" ") or blob[8 + n:] != ref[8 + m:]:
                errors.append(f"{path}: differs from the reference writer's bytes for the same tensors")
    missing = set(want) - set(seen)
    if missing:
        errors.append(f"tensors missing from the export: {sorted(missing)}")
    if exp["index"]:
        with open(exp["index"]) as f:
            index = json.load(f)
        if index["metadata"]["total_size"] != total:
            errors.append(f"{exp['index']}: total_size {index['metadata']['total_size']} != {total}")
        if index["weight_map"] != seen:
            errors.append(f"{exp['index']}: weight_map {index['weight_map']} != {seen}")


def main():
    with open(sys.argv[1]) as f:
        exports = json.load(f)
    errors = []
    for exp in exports:
        check_export(exp, errors)
    for e in errors:
        print("FAIL:", e)
    files = sum(len(e["files"]) for e in exports)
    print(f"checked {len(exports)} exports, {files} files with safetensors {safetensors.__version__}: "
          f"{'OK' if not errors else str(len(errors)) + ' problems'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
