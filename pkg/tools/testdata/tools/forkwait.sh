# Starts once $SKEIN_TEST_DIR/go exists (at most 30 s), then runs 8 processes at once: it needs
# its own share of processes while another call may be taking all it can.
i=0
while [ ! -e "$SKEIN_TEST_DIR/go" ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
for n in 1 2 3 4 5 6 7 8; do sleep 0.1 & done
wait
echo '"forked 8"'
