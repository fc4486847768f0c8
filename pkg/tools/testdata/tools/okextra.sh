echo '{"ok": true, "count": 3}'
