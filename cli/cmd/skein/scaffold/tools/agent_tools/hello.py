"""A skein tool: JSON arguments on stdin, one JSON object on stdout."""
import json
import sys

GREETINGS = {"en": "Hello", "fr": "Bonjour", "de": "Hallo", "es": "Hola"}


def main() -> int:
    args = json.load(sys.stdin)
    lang = args.get("lang", "en")
    if lang not in GREETINGS:
        print(f"hello: unknown language {lang!r}", file=sys.stderr)
        json.dump({"ok": False, "error": f"unknown language {lang!r}: use a two-letter code such as en, fr, de or es"}, sys.stdout)
        return 1
    json.dump({"ok": True, "result": {"greeting": f"{GREETINGS[lang]}, {args['name']}!"}}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
