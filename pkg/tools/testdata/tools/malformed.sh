echo "this is not json"
exit 1
