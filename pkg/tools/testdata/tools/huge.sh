printf '"'
head -c 9437184 /dev/zero | tr '\0' a
printf '"\n'
