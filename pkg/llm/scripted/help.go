package scripted

// Help is the script format for people: `skein help script` prints it, and the scaffolded
// agent.offline.yaml points there. TestHelpNamesEveryKey keeps it in step with the parser.
const Help = `A script is the offline model of llm.provider: scripted: a YAML file (llm.script) whose rules
answer every model call, so a mesh runs without a provider, a key or a network.

  rules:
    - when: {system: "(?i)guideline", last: "unknown language"}   # every key optional
      reply:
        text: "I'll greet Ada."
        tool_calls:
          - {name: hello, args: {name: Ada, lang: en}}
      times: 1
      delay_s: 2
      chunk_ms: 40
  chunk_ms: 0

The first rule whose when matches, and that is not used up, answers. No rule matching is an error
naming the script and quoting the start of the newest message (the step ends failed).

when (each a regular expression, RE2 syntax; a rule without when matches every call):
  system   the system prompt, its blocks joined by blank lines (the miner's starts with "skein-miner")
  last     the newest user message: its text and tool results, joined by newlines
  any      the whole conversation, every message
  tools    the names of the tools the call offers, one per line: (?m)^lookup$ answers only while
           lookup is offered

reply:
  text        the model's text; without tool calls it ends the turn (and the step, as a plain answer)
  tool_calls  tool calls, run as a model's would be:
    name      the tool, or finish {accomplished: bool, answer: string, reason?: string} to end the step
    args      the arguments, a YAML mapping sent as a JSON object; a value exactly "$1" … "$9" takes
              that capture group of when.last (a JSON number when it is one, else a string)
    args_raw  the arguments as this exact text instead (to send malformed JSON on purpose)

times     answer at most this many times per conversation (0 or absent: no limit); the uses are
          counted from the conversation's own transcript, so concurrent sessions each get the
          whole script and a task run again starts afresh
delay_s   think this long before answering, as a slow model would (seconds)
chunk_ms  stream the reply's text a word at a time, this many milliseconds apart, as a provider
          streams it (a rule's own, else the script's top-level chunk_ms; 0: all at once)

Token counts are real (o200k_base on the rendered prompt and the reply); the model is named
"scripted" and priced at 0 unless llm.model names a model of the price table.`
