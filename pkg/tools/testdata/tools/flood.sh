exec yes '{"ok": true}'
