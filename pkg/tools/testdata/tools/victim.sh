# Holds a secret in its environment (SKEIN_TEST_SECRET, which its manifest names): writes its
# pid to $SKEIN_TEST_DIR/victim.pid and waits for $SKEIN_TEST_DIR/done, at most 30 s.
echo $$ > "$SKEIN_TEST_DIR/victim.pid.tmp" && mv "$SKEIN_TEST_DIR/victim.pid.tmp" "$SKEIN_TEST_DIR/victim.pid"
i=0
while [ ! -e "$SKEIN_TEST_DIR/done" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
echo '{"ok": true}'
