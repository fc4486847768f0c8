# MCP both ways (docs/mcp.md): real third-party servers the tests
# mount as tools, and the official Python SDK the tests use as a client of `skein mcp serve`.
#   npm, under $(MCP_NODE): @modelcontextprotocol/server-everything and server-filesystem
#   PyPI: mcp (the Python SDK) into the tools venv, for the client; mcp-server-time into its own
#   venv under $(MCP_DIR), made from an interpreter every user can run ($(MCP_SERVER_PY)): the
#   servers run as uids of their own when the tests run as root, and a Python under a private
#   home (pyenv's under /root) is not theirs to run.
# The tests find them under $(TOOLS) (toolhost/mcpmount, toolhost, e2e) and
# skip without them, except under CI or SKEIN_REQUIRE_ALL=1, where they fail.

MCP_DIR       := $(TOOLS)/mcp
MCP_NODE      := $(MCP_DIR)/node
MCP_NPM       := @modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/server-filesystem@2026.8.31
MCP_NPM_STAMP := $(MCP_NODE)/.mcp-servers-2026.8.31.ok
MCP_PY        := mcp==2.3.0 mcp-types==2.3.0 mcp-server-time==2026.10.19 anyio==4.16.0 annotated-types==0.8.0 \
	click==8.5.1 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 h11==0.16.0 httpcore2==2.16.2 httpx2==2.16.2 \
	idna==3.20 jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 \
	attrs==26.1.0 opentelemetry-api==1.45.2 pydantic==2.14.4 pydantic_core==2.50.5 PyJWT==2.15.1 \
	python-multipart==0.0.34 sse-starlette==3.7.0 starlette==1.10.0 truststore==0.10.5 typing-inspection==0.4.5 \
	typing_extensions==4.16.0 tzdata==2026.6 tzlocal==5.4.5 uvicorn==0.54.0
MCP_PY_STAMP  := $(VENV)/.mcp-2.3.0.ok
MCP_SERVER_PY ?= /usr/bin/python3
MCP_SVENV     := $(MCP_DIR)/venv
MCP_SV_STAMP  := $(MCP_SVENV)/.mcp-server-time-2026.10.19.ok

.PHONY: mcp-setup
setup: mcp-setup
mcp-setup: $(MCP_NPM_STAMP) $(MCP_PY_STAMP) $(MCP_SV_STAMP)

# The servers run under the tool sandbox, as nobody when the tests run as root: their files must
# be readable by every user.
$(MCP_NPM_STAMP): mk/mcp.mk
	mkdir -p $(MCP_NODE)
	test -f $(MCP_NODE)/package.json || echo '{"name":"skein-mcp-servers","private":true}' > $(MCP_NODE)/package.json
	npm install --silent --no-audit --no-fund --prefix $(MCP_NODE) $(MCP_NPM)
	chmod -R a+rX $(MCP_DIR)
	touch $@

$(MCP_PY_STAMP): $(VENV)/.ok mk/mcp.mk
	$(VPY) -m pip install --quiet --disable-pip-version-check $(MCP_PY)
	touch $@

$(MCP_SV_STAMP): mk/mcp.mk
	test -x $(MCP_SVENV)/bin/python || $(MCP_SERVER_PY) -m venv $(MCP_SVENV)
	$(MCP_SVENV)/bin/python -m pip install --quiet --disable-pip-version-check $(MCP_PY)
	chmod -R a+rX $(MCP_DIR)
	touch $@
