# Console: the end-to-end test of the web console (gateway/cmd/skein/console_test.go) drives
# Debian's headless Chromium. Installed once with apt when no chromium is on PATH (CI runs as
# root on Debian); set SKEIN_CHROMIUM to use another executable.

.PHONY: console-setup
setup: console-setup
console-setup:
	@if [ -n "$$SKEIN_CHROMIUM" ] || command -v chromium >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	else \
		echo "console-setup: chromium is not installed; run 'sudo apt-get install chromium' (the console test needs it)" >&2; \
		exit 1; \
	fi
