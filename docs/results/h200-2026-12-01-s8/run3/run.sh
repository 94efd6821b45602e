#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Session 8, device run 3: whether an export runs beside a map.
python3 bench/export_probe.py --sizes-gib 64,16,1 --cycles 7 --gap 5 --out $OUT/export_probe.json 2>&1 | tee $OUT/export_probe.txt
