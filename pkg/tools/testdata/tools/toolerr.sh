echo '{"ok": false, "error": "no such city: Atlantis"}'
