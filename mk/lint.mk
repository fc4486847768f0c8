# staticcheck over every module, beside go vet: `make lint` alone, and in `make test`. Built from
# its Go module into $(TOOLS)/bin at a pinned version, so a new release's checks do not fail a
# clean run. Where a finding is intended (a fake API's error text copied word for word), the line
# says so with a //lint:ignore comment and its reason.
STATICCHECK_VERSION := v0.8.2
STATICCHECK         := $(TOOLS)/bin/staticcheck
STATICCHECK_STAMP   := $(TOOLS)/bin/.staticcheck-$(STATICCHECK_VERSION).ok

.PHONY: lint staticcheck-setup
setup: staticcheck-setup
staticcheck-setup: $(STATICCHECK_STAMP)

$(STATICCHECK_STAMP): mk/lint.mk
	mkdir -p $(TOOLS)/bin
	GOBIN=$(TOOLS)/bin GOWORK=off $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	touch $@

lint: $(STATICCHECK_STAMP)
	for m in $(MODULES); do (cd $$m && $(STATICCHECK) ./...) || exit 1; done
	cd e2e && $(STATICCHECK) -tags chaos ./...
