sleep 300 &
echo $! > "$SKEIN_TEST_PIDFILE.tmp" && mv "$SKEIN_TEST_PIDFILE.tmp" "$SKEIN_TEST_PIDFILE"
sleep 300
