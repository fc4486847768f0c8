#!/bin/sh
# The catalogue's second shared program: the same answer as stub.py, without Python.
cat >/dev/null
printf '{"ok":true,"result":{"tool":"%s","status":"done"}}\n' "$1"
