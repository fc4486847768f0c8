import json
import sys

args = json.load(sys.stdin)
print("about to divide", file=sys.stderr)
print(1 / 0)
