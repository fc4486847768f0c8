# Console: the end-to-end test of the web console (cli/cmd/skein/console_test.go) drives
# Debian's headless Chromium. Setup installs the package when no chromium is on PATH and it can
# (root with apt, as in CI); SKEIN_CHROMIUM names another executable. Without a browser the test
# skips with a message, except under CI (or SKEIN_REQUIRE_ALL=1), where it fails.

.PHONY: console-setup console-screenshots
setup: console-setup
console-setup:
	@if [ -n "$$SKEIN_CHROMIUM" ] || command -v chromium >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		echo "console-setup: installing Debian's chromium for the console test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	elif [ -n "$$CI" ] || [ "$$SKEIN_REQUIRE_ALL" = 1 ]; then \
		echo "console-setup: no chromium and cannot install it (needs root and apt-get); install Debian's chromium or set SKEIN_CHROMIUM" >&2; exit 1; \
	else \
		echo "console-setup: no chromium; the console test will skip (sudo apt-get install chromium, or set SKEIN_CHROMIUM)" >&2; \
	fi

# The screenshots in docs/ are the console test's own, taken against a real embedded mesh.
console-screenshots: console-setup memory-setup tools-examples
	cd cli && SKEIN_CONSOLE_SCREENSHOTS=$(ROOT)/docs $(GO) test -count=1 -run '^(TestConsoleEndToEnd|TestConsoleByKeyboardOnAPhone)$$' ./cmd/skein/
