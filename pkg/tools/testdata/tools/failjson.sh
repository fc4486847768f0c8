cat >/dev/null
echo "connecting to /data" >&2
echo "write failed" >&2
echo '{"ok": false, "error": "disk quota exceeded on /data", "result": {"written": 0}}'
exit 3
