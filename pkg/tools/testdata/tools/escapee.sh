# Leaves a process that is in neither the tool's process group nor its session, and is not its
# child: a double fork through setsid. Then either answers at once or hangs.
( setsid sh -c 'sleep 300 & echo $! > "$SKEIN_TEST_PIDFILE.tmp"; mv "$SKEIN_TEST_PIDFILE.tmp" "$SKEIN_TEST_PIDFILE"' & )
while [ ! -s "$SKEIN_TEST_PIDFILE" ]; do sleep 0.05; done
if [ "$SKEIN_TEST_HANG" = 1 ]; then sleep 300; fi
echo '"done"'
