i=0
while [ $i -lt 2000 ]; do echo "log line $i: still working on it" >&2; i=$((i+1)); done
echo "FATAL: ran out of retries" >&2
echo '{"ok": false, "error": "upstream refused the request"}'
exit 2
