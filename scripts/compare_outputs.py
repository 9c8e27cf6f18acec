#!/usr/bin/env python3
"""Compares the device's outputs with onnxruntime's: for each DIR/expected_NAME.npy (or
DIR/expected/NAME.npy), the
device's OUT/NAME.npy. Prints, per output, the largest error relative to the output's scale
(max |expected|), the largest absolute error and the minimum cosine similarity of any row
(last axis), and exits 1 when an output misses the limits given.

    python3 scripts/compare_outputs.py DIR OUT --max-rel 1e-3 --min-cosine 0.999
"""

import argparse
import glob
import os
import sys

import numpy as np


def main():
    p = argparse.ArgumentParser()
    p.add_argument("expected_dir")
    p.add_argument("device_dir")
    p.add_argument("--max-rel", type=float, required=True)
    p.add_argument("--min-cosine", type=float, required=True)
    a = p.parse_args()
    ok = True
    # DIR/expected_NAME.npy, or DIR/expected/NAME.npy (scripts/hf_export.py).
    files = sorted(glob.glob(os.path.join(a.expected_dir, "expected_*.npy")))
    prefix = "expected_"
    if not files:
        files = sorted(glob.glob(os.path.join(a.expected_dir, "expected", "*.npy")))
        prefix = ""
    if not files:
        sys.exit(f"no expected_*.npy or expected/*.npy in {a.expected_dir}")
    for f in files:
        name = os.path.basename(f)[len(prefix):-len(".npy")]
        want = np.load(f).astype(np.float64)
        got = np.load(os.path.join(a.device_dir, f"{name}.npy")).astype(np.float64)
        if got.shape != want.shape:
            print(f"output={name} shape {got.shape} != expected {want.shape} result=FAIL")
            ok = False
            continue
        scale = float(np.max(np.abs(want))) or 1.0
        err = float(np.max(np.abs(got - want)))
        rows_g = got.reshape(-1, got.shape[-1])
        rows_w = want.reshape(-1, want.shape[-1])
        norms = np.linalg.norm(rows_g, axis=1) * np.linalg.norm(rows_w, axis=1)
        cos = np.where(norms > 0, np.sum(rows_g * rows_w, axis=1) / np.maximum(norms, 1e-300), 1.0)
        min_cos = float(np.min(cos))
        rel = err / scale
        good = rel <= a.max_rel and min_cos >= a.min_cosine
        ok &= good
        print(
            f"output={name} versus=onnxruntime elements={want.size} scale={scale:.4g} "
            f"max_abs_error={err:.3e} max_error_relative_to_scale={rel:.3e} "
            f"min_row_cosine={min_cos:.7f} limits=rel<={a.max_rel:g},cosine>={a.min_cosine:g} "
            f"result={'PASS' if good else 'FAIL'}"
        )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
