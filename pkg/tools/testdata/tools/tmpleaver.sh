# Reports the marker files (and SysV shared memory segments) an earlier call left, then leaves
# its own: in the host's shared /tmp, /var/tmp and /dev/shm they would stay for the next call.
found=""
for d in /tmp /var/tmp /dev/shm; do
	[ -e "$d/skein-left-behind" ] && found="$found \"$d\","
done
for d in /tmp /var/tmp /dev/shm; do
	echo x > "$d/skein-left-behind" 2>/dev/null
done
segments=-1
if command -v ipcs >/dev/null && command -v ipcmk >/dev/null; then
	segments=$(ipcs -m | grep -c '^0x')
	ipcmk -M 4096 -p 0666 >/dev/null
fi
echo "{\"found\": [${found%,}], \"shm_segments\": $segments, \"tmpdir\": \"$TMPDIR\"}"
