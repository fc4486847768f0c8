# schemathesis: the HTTP API against its own OpenAPI document (docs/openapi.json). Installed
# into the tools venv, pinned; e2e/schemathesis_test.go runs it against `skein up --http` with a
# fixed seed and a bounded number of examples per operation (SKEIN_SCHEMATHESIS_EXAMPLES).
SCHEMATHESIS_VERSION := 4.32.5
SCHEMATHESIS_STAMP   := $(VENV)/.schemathesis-$(SCHEMATHESIS_VERSION).ok

.PHONY: schemathesis-setup
setup: schemathesis-setup
schemathesis-setup: $(SCHEMATHESIS_STAMP)

$(SCHEMATHESIS_STAMP): $(VENV)/.ok mk/schemathesis.mk
	$(VPY) -m pip install --quiet --disable-pip-version-check schemathesis==$(SCHEMATHESIS_VERSION)
	touch $@
