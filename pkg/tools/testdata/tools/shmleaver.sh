# Reports whether /dev/shm holds what an earlier call left there, then leaves a file there if
# its arguments say "leave": true (and nothing anywhere else).
found=false
[ -e /dev/shm/skein-shm-left ] && found=true
grep -q '"leave": *true' && echo x > /dev/shm/skein-shm-left
echo "{\"found\": $found}"
