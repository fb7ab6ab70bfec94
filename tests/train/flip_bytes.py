#!/usr/bin/env python3
"""flip_bytes.py PATH: inverts 64 bytes in the middle of a checkpoint file, where its tensors'
data lies (HDF5 checks only its own structures, so only the tensors' checksums tell), as a disk
or a copy might damage it. Standard library only."""
import os
import sys

path = sys.argv[1]
middle = os.path.getsize(path) // 2
with open(path, "r+b") as f:
    f.seek(middle)
    data = f.read(64)
    f.seek(middle)
    f.write(bytes(b ^ 0xFF for b in data))
