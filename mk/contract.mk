# The published contract: docs/asyncapi.json (NATS subjects and messages, from pkg/protocol) and
# docs/openapi.json (the HTTP API, from the gateway's route table). The tests fail when either
# is stale; this rewrites both.
.PHONY: contract
contract:
	cd pkg && $(GO) test -count=1 -run '^TestAsyncAPIDocumentIsCurrent$$' ./protocol/contract/ -update
	cd gateway && $(GO) test -count=1 -run '^TestOpenAPIDocumentIsCurrentAndServed$$' . -update
