# The nats CLI (natscli), the tool docs/contract.md and docs/security.md show for talking to a
# mesh without skein's own code. The e2e contract test runs it against a real mesh with the
# credentials file skein writes (`--nkey FILE`). Built from its Go module into $(TOOLS)/bin.
NATSCLI_VERSION := v0.5.1
NATSCLI_STAMP   := $(TOOLS)/bin/.nats-$(NATSCLI_VERSION).ok

.PHONY: nats-cli-setup
setup: nats-cli-setup
nats-cli-setup: $(NATSCLI_STAMP)

$(NATSCLI_STAMP): mk/nats-cli.mk
	mkdir -p $(TOOLS)/bin
	GOBIN=$(TOOLS)/bin GOWORK=off $(GO) install github.com/nats-io/natscli/nats@$(NATSCLI_VERSION)
	touch $@
