package main

import "testing"

func TestConsoleURL(t *testing.T) {
	for _, c := range []struct{ addr, token, want string }{
		{"127.0.0.1:8080", "skh_abc", "http://127.0.0.1:8080/console/#token=skh_abc"},
		{"0.0.0.0:9000", "skh_abc", "http://127.0.0.1:9000/console/#token=skh_abc"},
		{":9000", "a b%c&d", "http://127.0.0.1:9000/console/#token=a%20b%25c&d"},
		{"[::1]:8080", "t", "http://[::1]:8080/console/#token=t"},
	} {
		if got := consoleURL(c.addr, c.token); got != c.want {
			t.Errorf("consoleURL(%q, %q) = %q; want %q", c.addr, c.token, got, c.want)
		}
	}
}
