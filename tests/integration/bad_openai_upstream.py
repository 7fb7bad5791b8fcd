#!/usr/bin/python3
"""An OpenAI-compatible upstream that answers badly on purpose, for tests/integration/llm_test.cc.

Usage: bad_openai_upstream.py PORT. The request body's "model" chooses the answer:
  indices   a stream whose chunks name choices 1..300 (the request asked for one)
  jwtdrip   a stream that sends a JWT four characters per chunk
  overwrites  a stream of 6,000 chunks of backspace-and-a-letter (a terminal shows one letter,
            so nothing can go out) and then an access key
  parts     a stream whose chunk's content is an array, not a string
  controls  a stream whose content has colours, a hyperlink, a right-to-left override, a
            backspace and a lone carriage return in it
  controlsname  a stream whose tool call's name and id have a terminal sequence in them
  controlsanswer  an answer whose content has a colour, a right-to-left override, a soft hyphen
            and a Hangul filler in it
  logprobs  an answer whose logprobs repeat an e-mail address token by token
  toolargs  an answer whose tool call arguments hold an access key
  toolstream  a stream whose tool call's arguments carry an access key cut in two fragments
  toolafterfinish  a stream whose tool call's arguments go on after its choice finished
  usagesplit  a stream whose tool call's arguments are cut by a chunk without choices
  audiosplit  a stream whose delta.audio.transcript carries an access key in two fragments
  listshape  a stream whose delta list carries a key's first half without an index, then its
            second half with one
  idrotate  a stream whose tool call id says a key's halves the other way round, twice
  idsplit   a stream whose tool call id carries an access key in two fragments
  choiceorder  a stream of two choices whose first chunk is for choice 1
  choicesplit  a stream of two choices: choice 0 ends with an access key's first half, choice 1
            begins with its second (a client printing each chunk's first choice shows the key)
  wholesplit  an answer of two choices: the first ends with an access key's first half, the
            second begins with its second
  wholesplitok  the same with a blank between the halves
  answerdup  an answer that names "choices" twice, the first empty
  answerrev  an answer of two choices listed index 1 first
  answertoolfirst  an answer whose tool call (listed before the content) has an access key's
            second half, and whose content ends with its first
  answerparts  an answer whose content is two parts: "my phone is " and a bare number
  messagesplit  a stream whose chunks carry choices[0].message.content, an access key's halves
  reasoningsplit  a stream whose reasoning_content is an access key's first half and whose
            content, in the chunk that finishes, its second
  answerreasoning  an answer whose content (listed first) is an access key's second half and
            whose reasoning_content is its first
  answerdigits  an answer of two choices, "4111111111" and "111111"
  textanddelta  a stream whose choices carry both a text and a delta's content, an access key's
            halves in the two
  contentargs  a stream whose content, 2 KB of words, ends with an access key's first half, and
            whose tool call's arguments are its second
  reasoningfirst  a stream whose reasoning is an access key's first half and whose content
            begins with its second, then 2 KB of words
  rolerepeat  a stream whose usage chunk repeats the finished choice's role
  textnofinish  a completions stream (chunks with "text", object chat.completion.chunk) that ends
            without a finish_reason
  threekinds  a stream whose reasoning, content and refusal each hold a third of an access key
  twocalls  a stream of two tool calls whose arguments hold an access key's halves
  longjwt   a stream whose reasoning holds the first 50,000 bytes of a 60 KB JWT and whose
            content the rest
  hugejwt     a JWT of 107 KB in a stream, 80 KB of it in reasoning_content, the rest in content
  escapedargs  a stream whose tool call's arguments spell an access key with a JSON escape
  answerescaped  a whole answer whose content (JSON) spells an e-mail address with an escape
  escapedwindow  a stream whose content (JSON) spells an IBAN with escapes, longer as written
            than the hold-back window, in 3-byte chunks
  answerparsednumber  a whole answer whose content (JSON) holds a card as 4.111111111111111e15
  escapedpadding  a stream whose content (JSON) pads a card's groups apart with 2,800 escaped
            zero-width spaces, in 50-byte chunks
  escapedcontrol  a whole answer whose content (JSON) puts an escaped soft hyphen before an
            access key (a terminal shows "XX-AKIA...")
  nestedcontrol  the same one level deeper: in a string of JSON inside the content's JSON
  barenumberargs  a stream whose tool call's arguments are a bare number, a card written with
            an exponent
  escapedjoin  a stream whose content (JSON) has "\\u00", an escaped left-to-right mark and
            "1b[1DE" after an access key's first 19 characters and a "1", in 11-byte chunks
  longbackslashes  a stream whose content (JSON) has 65,600 letters, 1,301 backslashes and
            "u0041KIAIOSFODNN7EXAMPLE", in 4,096-byte chunks
  escapedsplitN  a clean stream whose content (JSON) holds an Arabic word with a right-to-left
            mark, a soft hyphen, an emoji's surrogate pair, escaped quotes and a literal "\\u200f",
            all escaped, in N-byte chunks (N = 1, 5, 7)
  escapedcr  a stream whose content (JSON) is {"k":"????????ODNN7EXAMPLE\\rAKIAIOSF"} (a
            terminal shows an access key after the carriage return), in one chunk
  escapedcrnull  the same as escapedcr in a list that opens with null, in 7-byte chunks
  escapedcrff  the same as escapedcr after a form feed, in 7-byte chunks
  escapedcrblanks  the same as escapedcr in a list whose "[" is followed by 14,600 chunks of four
            blanks before its first value
  tagpadding  a stream whose content (JSON) parts a card's first digit from the rest with 700
            escaped tag characters, in chunks of ten
  escapedcontrolstream  a stream whose content (JSON) spells a right-to-left override before an
            access key written backwards, in 5-byte chunks
  escapedtail  a stream whose content (JSON) spells the context word "telefone" with an escape,
            then a bare phone number, in 3-byte chunks (the escape goes out first)
  answerbigdecoy  a whole answer whose content (JSON a strict parser refuses: an integer too
            large) holds a CNPJ in a string and as a number written with an exponent
  escapedzw  a stream of 12,000 chunks of two escaped zero-width spaces and a blank
  escapedclean  a clean stream whose content is JSON with escapes (a line feed, a regex's \\b, a
            quote), in 4-byte chunks
  longsignature  a clean stream whose reasoning_details carry a 1,000-byte signature, as
            OpenRouter sends Claude's thinking
  tworeasonings  a stream whose "reasoning" is an access key's first half, "reasoning_content"
            "zz", and content its second half
  refusalskip  a stream whose content is an access key's first half, refusal "x", and a tool
            call's arguments its second half
  answerrefusalskip  the same as a whole answer
  detailsabove  a stream whose content begins with an access key's second half and whose
            reasoning_details (shown above it) holds its first
  numberrefusal  a stream whose content is a card's first three groups and whose refusal is
            the number 1111
  contextafter  a stream whose content ends with a bare phone number and whose refusal names it
  toolname  a stream whose content ends with an access key's first half and whose tool call is
            named its second
  answerthinking  a whole answer whose thinking_blocks hold an access key's first half and whose
            content its second
  answerrefusalnumber  a whole answer whose content is a card's first three groups and whose
            refusal is the number 1111
  chunkmessage  a stream whose chunk carries an e-mail address in choices[0].message and an
            access key in a member of its own
  toolstreamok  a stream of two tool calls, the first's arguments an e-mail address cut in two,
            and a refusal with another
  nousage   an answer of six words without a usage
  nousagestream  a stream of five chunks that ends without a usage chunk
  bigstall  a stream of two chunks of 120 words each, then 3 s of nothing before the rest
  usagestall  a stream of a chunk of 6 words, its finish and a usage of 40000 + 9000 tokens,
            then 1.5 s of nothing before [DONE]
  doneopen  a stream of five chunks and [DONE], and then 3 s before the body's end
  donemore  a stream of five chunks whose last HTTP chunk holds [DONE] and one more event, all
            in one write
  nodone    a stream of five chunks whose body ends cleanly without [DONE]
  endless   a stream without end, an event every 5 ms
  flood     a stream without end, as fast as it is read
  lateflood the same after 0.9 s of nothing
  steady    20 MB of 4 KiB events evenly over 3 s, then [DONE] and the body's end
  bigdone   12 MB of 1 KiB events at once, then [DONE] and the body's end
  latebig   the same after 2.4 s of nothing
  latedone  a stream of 1.6 MB of words, then a tool call with 900 KB of arguments (which the
            guard holds until the choice ends: it never says it did), then [DONE], and then 8 s
            before the body's end
  embsecret  an embeddings answer with an access key in a member of its own
  embplain  an embeddings answer of three numbers
  usagefirst  a stream that opens with a chunk without choices whose system_fingerprint is an
            access key, sent over several "data:" lines
  usagelast  a stream whose last chunk without choices carries an e-mail address in a member of
            its own, sent over several "data:" lines
  idwhole   a stream whose tool call id is a card number, once
  idobject  a stream whose delta's role is an object carrying a key's halves, in two chunks
  refusalnumbers  a stream whose refusal is a card number in two numbers
  refusallist  a stream whose refusal is a key's halves in two lists of strings
  padded    a stream whose content is a card cut in two, soft hyphens and a blank before the cut
  membername  a stream whose delta has a member named by an access key
  headiban  a stream whose id is an IBAN, whose text is flushed at [DONE] without a finish
  numberafterfinish  a stream whose refusal is a card's first twelve digits, then, after its
            choice finished, the last four as a number
  idfour    a stream whose tool call id is "4242", four times (a card when joined)
  refusalfloat  a stream whose refusal is a card written as 4.111111111111111e15
  formfeed  a stream whose content is a deny phrase padded with forty form feeds
  padmore   a stream whose content is a card cut in two, 120 KB of zero-width spaces before the cut
  listorder  a stream whose delta list sends element 1 before element 0
  tgitool   a stream whose tool call comes as an object, not a list (TGI 2.x), its arguments an
            e-mail address cut in two
  tgitwo    a stream of two tool calls each sent as an object, not a list, an e-mail address's
            halves in their arguments
  tgimixed  a stream whose tool call comes as an object, then as a list's element
  tgidrop   a stream whose tool call comes as an object with its index, then without it (the
            same call to a client), an e-mail address cut in two in its arguments
  tgilate   a stream whose tool call comes as an object without an index, then with one
  deep      a stream whose delta nests twenty objects deep
  answerfloat  an answer whose content is a card written as a float
  usagecard  a stream whose usage's total_tokens is a card number (it does not add up)
  answerhead  an answer whose system_fingerprint is an access key
  answerlogprobs  a clean answer whose logprobs carry an access key token by token
  answernumber  an answer whose content is a card number written as a JSON number
  answername  an answer whose message has a member named by an e-mail address
GET (the health check) answers 200.
"""
import base64
import json
import socket
import sys
import threading
import time

JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9l"
       "IiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")


def chunk(index, content):
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
            "choices": [{"index": index, "delta": {"content": content}, "finish_reason": None}]}


def tool_chunk(call, arguments, first=False):
    function = {"arguments": arguments}
    tool = {"index": call, "function": function}
    if first:
        tool.update({"id": "t%d" % call, "type": "function"})
        function["name"] = "store"
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
            "choices": [{"index": 0, "delta": {"tool_calls": [tool]}, "finish_reason": None}]}


def refusal_chunk(text):
    return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
            "choices": [{"index": 0, "delta": {"refusal": text}, "finish_reason": None}]}


def delta_chunk(delta, **extra):
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
             "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    chunk.update(extra)
    return chunk


def usage_chunk(**extra):
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
             "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                      "total_tokens": 2}}
    chunk.update(extra)
    return chunk


# Sent over several "data:" lines, one per member: an SSE reader joins them with line breaks.
MULTILINE = "multiline"


def stream(model):
    finish = "stop"
    if model == "usagefirst":
        events = [(MULTILINE, usage_chunk(system_fingerprint="AKIAIOSFODNN7EXAMPLE")),
                  chunk(0, "hi")]
    elif model == "usagelast":
        events = [chunk(0, "hi"), chunk(0, " there")]
    elif model == "idwhole":
        events = [delta_chunk({"role": "assistant", "tool_calls": [
            {"index": 0, "id": "4111 1111 1111 1111", "type": "function",
             "function": {"name": "f", "arguments": ""}}]})]
        finish = "tool_calls"
    elif model == "idobject":
        events = [delta_chunk({"role": {"x": "AKIAIOSF"}}), delta_chunk({"role": {"x": "ODNN7EXAMPLE"}})]
    elif model == "refusalnumbers":
        events = [delta_chunk({"refusal": 4111111}), delta_chunk({"refusal": 111111111})]
    elif model == "refusallist":
        events = [delta_chunk({"refusal": ["AKIAIOSF"]}), delta_chunk({"refusal": ["ODNN7EXAMPLE"]})]
    elif model == "padded":
        events = [chunk(0, "card 4111 1111 1111" + "\u00ad" * 16 + " "), chunk(0, "1111 ok")]
    elif model == "headiban":
        events = [delta_chunk({"role": "assistant", "content": "hello there"},
                              id="DE89370400440532013000")]
        finish = None
    elif model == "numberafterfinish":
        events = [delta_chunk({"refusal": "card 4111 1111 1111 "}),
                  {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                  delta_chunk({"refusal": 1111})]
    elif model == "idfour":
        events = [delta_chunk({"tool_calls": [{"index": 0, "id": "4242", "type": "function",
                                               "function": {"name": "f", "arguments": ""}}]})
                  for _ in range(4)]
        finish = "tool_calls"
    elif model == "refusalfloat":
        events = ['{"id":"c","object":"chat.completion.chunk","created":1,"model":"bad",'
                  '"choices":[{"index":0,"delta":{"refusal":4.111111111111111e15},'
                  '"finish_reason":null}]}']
    elif model == "formfeed":
        events = [chunk(0, "we discussed project "), chunk(0, "\f" * 40),
                  chunk(0, "nightingale today")]
    elif model == "padmore":
        events = ([chunk(0, "card 4111 1111 1111")] + [chunk(0, "\u200b" * 4000)] * 10 +
                  [chunk(0, " 1111 ok")])
    elif model == "listorder":
        events = [delta_chunk({"annotations": [{"index": 1, "id": "zq@exa"}]}),
                  delta_chunk({"annotations": [{"index": 0, "id": "mple.org"}]})]
    elif model in ("tgidrop", "tgilate"):
        first = {"index": 0, "id": "0", "type": "function",
                 "function": {"name": "send", "arguments": '{"to": "zq.tool@exa'}}
        later = {"function": {"arguments": 'mple.org"}'}}
        if model == "tgilate":
            del first["index"]
            later["index"] = 0
        events = [delta_chunk({"role": "assistant", "tool_calls": first}),
                  delta_chunk({"tool_calls": later})]
        finish = "tool_calls"
    elif model in ("tgitool", "tgitwo", "tgimixed"):
        def call(index, arguments, first=False):
            tool = {"index": index, "function": {"arguments": arguments}}
            if first:
                tool.update({"id": str(index), "type": "function"})
                tool["function"]["name"] = "send"
            return tool
        second = {"tgitool": call(0, 'mple.org"}'), "tgitwo": call(1, 'mple.org"}', True),
                  "tgimixed": [call(0, 'mple.org"}')]}[model]
        events = [delta_chunk({"role": "assistant", "tool_calls": call(0, "", True)}),
                  delta_chunk({"tool_calls": call(0, '{"to": "zq.tool@exa')}),
                  delta_chunk({"tool_calls": second})]
        finish = "tool_calls"
    elif model == "deep":
        nested = {"text": "x"}
        for _ in range(20):
            nested = {"inner": nested}
        events = [delta_chunk({"extra": nested})]
    elif model == "usagecard":
        events = [chunk(0, "hi")]
    elif model == "membername":
        events = [delta_chunk({"content": "hi", "AKIAIOSFODNN7EXAMPLE": "x"})]
    elif model == "toolstream":
        events = [tool_chunk(0, "", True), tool_chunk(0, '{"key": "AKIAIOSF'),
                  tool_chunk(0, 'ODNN7EXAMPLE"}')]
        finish = "tool_calls"
    elif model == "toolafterfinish":
        events = [tool_chunk(0, "", True), tool_chunk(0, '{"key": "AKIAIOSF'),
                  {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
                  tool_chunk(0, 'ODNN7EXAMPLE"}')]
        finish = "tool_calls"
    elif model == "usagesplit":
        events = [tool_chunk(0, "", True), tool_chunk(0, '{"key": "AKIAIOSF'),
                  {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": []},
                  tool_chunk(0, 'ODNN7EXAMPLE"}')]
        finish = "tool_calls"
    elif model == "audiosplit":
        events = [{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 0, "delta": {"audio": {"transcript": part}},
                                "finish_reason": None}]}
                  for part in ["key AKIAIOSF", "ODNN7EXAMPLE ok"]]
    elif model == "listshape":
        def details(item):
            return {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                    "choices": [{"index": 0, "delta": {"reasoning_details": [item]},
                                 "finish_reason": None}]}
        events = [details({"type": "reasoning.text", "text": "key AKIAIOSF"}),
                  details({"index": 0, "type": "reasoning.text", "text": "ODNN7EXAMPLE"})]
    elif model == "idsplit":
        events = [{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 0, "delta": {"tool_calls": [
                       {"index": 0, "id": part, "type": "function",
                        "function": {"arguments": ""}}]}, "finish_reason": None}]}
                  for part in ["AKIAIOSF", "ODNN7EXAMPLE"]]
        finish = "tool_calls"
    elif model == "idrotate":
        events = [{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 0, "delta": {"tool_calls": [
                       {"index": 0, "id": "ODNN7EXAMPLE AKIAIOSF", "type": "function",
                        "function": {"arguments": ""}}]}, "finish_reason": None}]}
                  for _ in range(2)]
        finish = "tool_calls"
    elif model == "choiceorder":
        events = [chunk(1, "key AKIAIOSF"), chunk(0, "ODNN7EXAMPLE ok")]
    elif model == "choicesplit":
        finish = None
        events = [chunk(0, "key AKIAIOSF"),
                  {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
                  chunk(1, "ODNN7EXAMPLE end"),
                  {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}]}]
    elif model in ("contentargs", "reasoningfirst"):
        fill = " ".join("word%d" % i for i in range(300))
        finish = None
        if model == "contentargs":
            events = [delta_chunk({"role": "assistant", "content": fill + " the key is AKIAIOSF"}),
                      tool_chunk(0, "ODNN7EXAMPLE ok", first=True),
                      {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}]
        else:
            events = [delta_chunk({"role": "assistant", "reasoning_content": "the key is AKIAIOSF"}),
                      delta_chunk({"content": "ODNN7EXAMPLE ok. " + fill}),
                      {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                       "choices": [{"index": 0, "delta": {"content": " end."},
                                    "finish_reason": "stop"}]}]
    elif model == "threekinds":
        events = [delta_chunk({"role": "assistant", "content": ""}),
                  delta_chunk({"reasoning_content": "the key is AKIA"}),
                  delta_chunk({"content": "IOSFODNN"}),
                  delta_chunk({"refusal": "7EXAMPLE ok"})]
    elif model == "twocalls":
        events = [tool_chunk(0, "the key is AKIAIOSF", True), tool_chunk(1, "ODNN7EXAMPLE ok", True)]
        finish = "tool_calls"
    elif model == "longjwt":
        def b64(raw):
            return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        token = ".".join([b64(b'{"alg":"HS256","typ":"JWT"}'),
                          b64(json.dumps({"sub": "u", "d": "x" * 45000}).encode()),
                          b64(bytes(range(32)))])
        events = [delta_chunk({"role": "assistant", "reasoning_content": "token " + token[:50000]}),
                  delta_chunk({"content": token[50000:] + " ok"})]
    elif model == "hugejwt":
        def b64(raw):
            return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
        token = ".".join([b64(b'{"alg":"HS256","typ":"JWT"}'),
                          b64(json.dumps({"sub": "u", "d": "x" * 80000}).encode()),
                          b64(bytes(range(32)))])
        events = [delta_chunk({"role": "assistant", "reasoning_content": "token " + token[:80000]}),
                  delta_chunk({"content": token[80000:] + " ok"})]
    elif model in ("detailsabove", "numberrefusal", "contextafter", "toolname"):
        words = " ".join("word%d" % i for i in range(100))
        if model == "detailsabove":
            events = [delta_chunk({"role": "assistant", "content": "ODNN7EXAMPLE is the rest. " + words}),
                      delta_chunk({"reasoning_details": [{"type": "reasoning.text", "index": 0,
                                                          "text": "the key is AKIAIOSF"}]}),
                      delta_chunk({"content": " end."})]
        elif model == "numberrefusal":
            events = [delta_chunk({"role": "assistant", "content": "card 4111 1111 1111 "}),
                      delta_chunk({"refusal": 1111})]
        elif model == "contextafter":
            events = [delta_chunk({"role": "assistant", "content": words + " reach me at 4155552671"}),
                      delta_chunk({"refusal": " is my phone, call me"})]
        else:
            finish = "tool_calls"
            events = [delta_chunk({"role": "assistant", "content": "the key is AKIAIOSF"}),
                      delta_chunk({"tool_calls": [{"index": 0, "id": "t0", "type": "function",
                                                   "function": {"name": "ODNN7EXAMPLE",
                                                                "arguments": "{}"}}]})]
    elif model == "escapedargs":
        finish = "tool_calls"
        events = [tool_chunk(0, '{"key": "AKIAIOSF\\u004fDNN7EXAMPLE"}', True)]
    elif model == "escapedwindow":
        escaped = "".join("\\u%04x" % ord(c) if c != " " else " "
                          for c in "DE89 3704 0044 0532 0130 00")
        text = '{"iban":"' + escaped + '"}'
        events = [delta_chunk({"role": "assistant", "content": ""})]
        events += [delta_chunk({"content": text[i:i + 3]}) for i in range(0, len(text), 3)]
    elif model == "escapedpadding":
        text = '{"c":"4111' + "\\u200b" * 1400 + " " + "\\u200b" * 1400 + '1111 1111 1111"}'
        events = [delta_chunk({"role": "assistant", "content": ""})]
        events += [delta_chunk({"content": text[i:i + 50]}) for i in range(0, len(text), 50)]
    elif model == "escapedcontrolstream":
        text = '{"k":"\\u202e' + "AKIAIOSFODNN7EXAMPLE"[::-1] + '"}'
        events = [delta_chunk({"role": "assistant", "content": ""})]
        events += [delta_chunk({"content": text[i:i + 5]}) for i in range(0, len(text), 5)]
    elif model == "escapedtail":
        text = ('{"note":"my t\\u0065lefone, the one I gave you on monday: 4155552671 ok, '
                'and more words after it to let the window go"}')
        events = [delta_chunk({"role": "assistant", "content": ""})]
        events += [delta_chunk({"content": text[i:i + 3]}) for i in range(0, len(text), 3)]
    elif model == "escapedjoin":
        text = '{"k":"AKIAIOSFODNN7EXAMPL1\\u00\\u200e1b[1DE"}'
        events = [delta_chunk({"role": "assistant", "content": ""})]
        events += [delta_chunk({"content": text[i:i + 11]}) for i in range(0, len(text), 11)]
    elif model == "longbackslashes":
        text = '{"k":"' + "x" * 65600 + "\\" * 1301
        events = [delta_chunk({"role": "assistant", "content": ""})]
        events += [delta_chunk({"content": text[i:i + 4096]}) for i in range(0, len(text), 4096)]
        events.append(delta_chunk({"content": 'u0041KIAIOSFODNN7EXAMPLE"}'}))
    elif model.startswith("escapedsplit"):
        size = int(model[len("escapedsplit"):])
        text = ('{"ar":"\\u0627\\u0644\\u200f100","de":"Donau\\u00addampf",'
                '"e":"\\ud83d\\ude00","q":"\\"x\\"","lit":"\\\\u200f"}')
        events = [delta_chunk({"role": "assistant", "content": ""})]
        events += [delta_chunk({"content": text[i:i + size]}) for i in range(0, len(text), size)]
    elif model == "escapedcr":
        events = [delta_chunk({"role": "assistant", "content": ""}),
                  delta_chunk({"content": '{"k":"????????ODNN7EXAMPLE\\rAKIAIOSF"}'})]
    elif model in ("escapedcrnull", "escapedcrff"):
        text = ('[null,"????????ODNN7EXAMPLE\\rAKIAIOSF"]' if model == "escapedcrnull" else
                '\f{"k":"????????ODNN7EXAMPLE\\rAKIAIOSF"}')
        events = [delta_chunk({"role": "assistant", "content": ""})]
        events += [delta_chunk({"content": text[i:i + 7]}) for i in range(0, len(text), 7)]
    elif model == "escapedcrblanks":
        events = [delta_chunk({"role": "assistant", "content": "["})]
        events += [delta_chunk({"content": "    "}) for _ in range(14600)]
        events.append(delta_chunk({"content": '"????????ODNN7EXAMPLE\\rAKIAIOSF"]'}))
    elif model == "barenumberargs":
        finish = "tool_calls"
        events = [tool_chunk(0, "4.111111111111111e15", True)]
    elif model == "tagpadding":
        events = [delta_chunk({"role": "assistant", "content": '{"c":"4'})]
        events += [delta_chunk({"content": "\\udb40\\udc20" * 10}) for _ in range(70)]
        events += [delta_chunk({"content": part}) for part in ["111", " 1111", " 1111", " 1111",
                                                              '"}']]
    elif model == "escapedzw":
        events = [delta_chunk({"role": "assistant", "content": ""})]
        events += [delta_chunk({"content": "\\u200b\\u200b "}) for _ in range(12000)]
    elif model == "escapedclean":
        text = ('{"pattern":"\\\\bfoo\\\\b","note":"line one\\nline two","said":"\\"yes\\""}')
        events = [delta_chunk({"role": "assistant", "content": ""})]
        events += [delta_chunk({"content": text[i:i + 4]}) for i in range(0, len(text), 4)]
    elif model == "longsignature":
        signature = ("EqQBCkgIARABGAIiQL" * 80)[:1000]
        events = [delta_chunk({"role": "assistant", "reasoning_details": [
                      {"type": "reasoning.text", "text": "Let me think.", "signature": signature,
                       "format": "anthropic-claude-v1", "index": 0}]}),
                  delta_chunk({"content": "The answer is 42."})]
    elif model == "tworeasonings":
        events = [delta_chunk({"role": "assistant", "reasoning": "key AKIAIOSF"}),
                  delta_chunk({"reasoning_content": "zz"}),
                  delta_chunk({"content": "ODNN7EXAMPLE ok"})]
    elif model == "refusalskip":
        events = [delta_chunk({"role": "assistant", "content": "key AKIAIOSF"}),
                  delta_chunk({"refusal": "x"}), tool_chunk(0, "ODNN7EXAMPLE ok", True)]
        finish = "tool_calls"
    elif model == "rolerepeat":
        finish = None
        events = [delta_chunk({"role": "assistant", "content": "hello"}),
                  {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 0, "delta": {"role": "assistant"},
                                "finish_reason": "stop"}]},
                  {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 0, "delta": {"role": "assistant"},
                                "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}]
    elif model == "textnofinish":
        finish = None
        events = [{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 0, "text": w, "finish_reason": None}]}
                  for w in ["Hello", " world,", " no finish", " reason here."]]
    elif model == "textanddelta":
        finish = None
        events = [{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 0, "delta": {"content": "key AKIAIOSF"}, "text": "zz ",
                                "finish_reason": None}]},
                  {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 0, "text": "ODNN7EXAMPLE ok",
                                "delta": {"content": " and more"}, "finish_reason": "stop"}]}]
    elif model == "reasoningsplit":
        finish = None
        events = [delta_chunk({"role": "assistant", "reasoning_content": "key AKIAIOSF"}),
                  {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "choices": [{"index": 0, "delta": {"content": "ODNN7EXAMPLE ok"},
                                "finish_reason": "stop"}]}]
    elif model == "messagesplit":
        events = []
        for half in ("key AKIAIOSF", "ODNN7EXAMPLE ok"):
            events.append({"id": "c", "object": "chat.completion.chunk", "created": 1,
                           "model": "bad",
                           "choices": [{"index": 0, "delta": {},
                                        "message": {"role": "assistant", "content": half},
                                        "finish_reason": None}]})
    elif model == "chunkmessage":
        events = [{"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                   "extra": {"note": "mail zq.extra@example.org"},
                   "choices": [{"index": 0, "delta": {"content": "hi"},
                                "message": {"content": "mail zq.msg@example.org"},
                                "finish_reason": None}]}]
    elif model == "toolstreamok":
        events = [tool_chunk(0, "", True), tool_chunk(0, '{"to": "zq.tool@'),
                  tool_chunk(1, "", True), tool_chunk(1, '{"n": 1}'),
                  tool_chunk(0, 'example.org"}'), refusal_chunk("ask zq.ref"),
                  refusal_chunk("@example.org")]
        finish = "tool_calls"
    elif model == "indices":
        events = [chunk(i, "x") for i in range(1, 301)]
    elif model == "jwtdrip":
        text = "token " + JWT + " end"
        events = [chunk(0, text[i:i + 4]) for i in range(0, len(text), 4)]
    elif model == "overwrites":
        events = [chunk(0, "start x")] + [chunk(0, "\bx") for _ in range(6000)]
        events.append(chunk(0, " key " + "AKIAIOSF" + "ODNN7EXAMPLE" + " end"))
    elif model == "controls":
        events = [chunk(0, "red \x1b[31mtext\x1b[0m and "), chunk(0, "\u202eright\u202c, a\bb"),
                  chunk(0, " \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ done\r")]
    elif model == "controlsname":
        events = [tool_chunk(0, "{}", first=True)]
        call = events[0]["choices"][0]["delta"]["tool_calls"][0]
        call["function"]["name"] = "st\x1b[2Kore"
        call["id"] = "t\x1b[2K0"
    elif model == "nousagestream":
        events = [chunk(0, w) for w in ["one", " two", " three", " four", " five"]]
    else:  # parts
        events = [chunk(0, "hi"), chunk(0, [{"type": "text", "text": "x@example.org"}])]
    if finish is not None:
        events.append({"id": "c", "object": "chat.completion.chunk", "created": 1,
                       "model": "bad",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if model == "usagecard":
        events.append({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                       "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                "total_tokens": 4111111111111111}})
    if model == "usagelast":
        events.append((MULTILINE, usage_chunk(note="mail zq.usage@example.org")))
    # Pieces joined once: bytes concatenated in a loop copy the whole stream each time, and a
    # stream of 14,600 events took 12 s to build (its test's client gave up after 10).
    pieces = []
    for e in events:
        if isinstance(e, tuple):  # (MULTILINE, chunk)
            data = ("data: " + json.dumps(e[1], indent=1).replace("\n", "\ndata: ") +
                    "\n\n").encode()
        elif isinstance(e, str):  # written by hand
            data = ("data: " + e + "\n\n").encode()
        else:
            data = ("data: " + json.dumps(e) + "\n\n").encode()
        pieces.append(b"%x\r\n%s\r\n" % (len(data), data))
    done = b"data: [DONE]\n\n"
    pieces.append(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
    out = b"".join(pieces)
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            b"Connection: close\r\n\r\n" + out)


def embeddings(model):
    item = {"object": "embedding", "index": 0, "embedding": [0.1, -0.2, 0.3]}
    if model == "embsecret":
        item["text"] = "key AKIAIOSFODNN7EXAMPLE"
    reply = {"object": "list", "data": [item], "model": "bad",
             "usage": {"prompt_tokens": 1, "total_tokens": 1}}
    body = json.dumps(reply).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def answer(model):
    if model.startswith("emb"):
        return embeddings(model)
    message = {"role": "assistant", "content": "fine"}
    choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
    extra = {}
    if model == "logprobs":
        message["content"] = "mail zq.lp@example.org"
        choice["logprobs"] = {"content": [{"token": t, "logprob": -0.1} for t in
                                          ["mail", " zq", ".lp", "@example", ".org"]]}
    elif model == "answerhead":
        extra["system_fingerprint"] = "AKIAIOSFODNN7EXAMPLE"
    elif model == "answerlogprobs":
        choice["logprobs"] = {"content": [{"token": t, "logprob": -0.1} for t in
                                          ["key ", "AKIAIOSF", "ODNN7EXAMPLE"]]}
    elif model == "answernumber":
        message["content"] = 4111111111111111
    elif model == "answerfloat":
        message["content"] = 4.111111111111111e15
    elif model == "controlsanswer":
        message["content"] = "ok \x1b[31mred\x1b[0m \u202eX\u00ad\u3164"
    elif model == "answerdup":
        body = ('{"id":"c","object":"chat.completion","created":1,"model":"bad","choices":[],'
                '"choices":[{"index":0,"message":{"role":"assistant","content":"fine"},'
                '"finish_reason":"stop"}]}').encode()
        return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    elif model == "answerrev":
        second = {"role": "assistant", "content": "two"}
        extra["choices"] = [{"index": 1, "message": second, "finish_reason": "stop"}, choice]
    elif model == "answertoolfirst":
        message.clear()
        message["role"] = "assistant"
        message["tool_calls"] = [{"id": "t1", "type": "function", "function": {
            "name": "store", "arguments": "ODNN7EXAMPLE ok"}}]
        message["content"] = "key AKIAIOSF"
    elif model == "answerthinking":
        message["content"] = "ODNN7EXAMPLE is the rest"
        message["thinking_blocks"] = [{"type": "thinking", "thinking": "the key is AKIAIOSF"}]
    elif model == "answerrefusalnumber":
        message["content"] = "card 4111 1111 1111 "
        message["refusal"] = 1111
    elif model == "answerescaped":
        message["content"] = '{"mail": "bob\\u0040example.com"}'
    elif model == "escapedcontrol":
        message["content"] = '{"k":"XX\\u00ADAKIAIOSFODNN7EXAMPLE"}'
    elif model == "nestedcontrol":
        message["content"] = json.dumps({"p": '{"k":"XX\\u00ADAKIAIOSFODNN7EXAMPLE"}'})
    elif model == "answerbigdecoy":
        message["content"] = ('{"a":"11222333000181","n":1.1222333000181e13,'
                              '"big":123456789012345678901234567890}')
    elif model == "answerparsednumber":
        message["content"] = '{"card":4.111111111111111e15}'
    elif model == "answerrefusalskip":
        message["content"] = "key AKIAIOSF"
        message["refusal"] = "x"
        message["tool_calls"] = [{"id": "t1", "type": "function", "function": {
            "name": "store", "arguments": "ODNN7EXAMPLE ok"}}]
    elif model == "answerreasoning":
        message["content"] = "ODNN7EXAMPLE ok"
        message["reasoning_content"] = "key AKIAIOSF"
    elif model == "answerdigits":
        message["content"] = "4111111111"
        second = {"role": "assistant", "content": "111111"}
        extra["choices"] = [choice, {"index": 1, "message": second, "finish_reason": "stop",
                                     "logprobs": None}]
    elif model == "answerparts":
        message["content"] = [{"type": "text", "text": "my phone is "},
                              {"type": "text", "text": "2025550143 ok"}]
    elif model in ("wholesplit", "wholesplitok"):
        message["content"] = "key AKIAIOSF"
        second = {"role": "assistant",
                  "content": (" " if model == "wholesplitok" else "") + "ODNN7EXAMPLE end"}
        extra["choices"] = [choice, {"index": 1, "message": second, "finish_reason": "stop",
                                     "logprobs": None}]
    elif model == "answername":
        message["zq.name@example.org"] = "x"
    elif model == "nousage":
        message["content"] = "one two three four five six"
    else:  # toolargs
        message["tool_calls"] = [{"id": "t1", "type": "function", "function": {
            "name": "store", "arguments": json.dumps({"key": "AKIAIOSFODNN7EXAMPLE"})}}]
    reply = {"id": "c", "object": "chat.completion", "created": 1, "model": "bad",
             "choices": [choice],
             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
    if model == "nousage":
        del reply["usage"]
    reply.update(extra)
    body = json.dumps(reply).encode()
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def stall_head():
    out = b""
    for e in [chunk(0, " word" * 120), chunk(0, " more" * 120)]:
        data = ("data: " + json.dumps(e) + "\n\n").encode()
        out += b"%x\r\n%s\r\n" % (len(data), data)
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + out)


def late_done_head():
    def event(e):
        data = ("data: " + json.dumps(e) + "\n\n").encode()
        return b"%x\r\n%s\r\n" % (len(data), data)
    out = b"".join(event(chunk(0, " word" * 6554)) for _ in range(50))
    out += event(tool_chunk(0, "", first=True)) + event(tool_chunk(0, "arg " * 225000))
    out += b"%x\r\n%s\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n")
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + out)


def handle(connection):
    try:
        data = b""
        while b"\r\n\r\n" not in data:
            piece = connection.recv(65536)
            if not piece:
                return
            data += piece
        head, _, body = data.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        while len(body) < length:
            piece = connection.recv(65536)
            if not piece:
                return
            body += piece
        if head.startswith(b"GET"):
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            return
        model = json.loads(body).get("model", "")
        if model == "doneopen":  # the body's end comes 3 s after [DONE]
            whole = stream("nousagestream")
            connection.sendall(whole[:-5])  # all but the last chunk, "0\r\n\r\n"
            time.sleep(3)
            connection.sendall(whole[-5:])
            return
        if model == "donemore":  # [DONE] and one more event in the last HTTP chunk, one write
            whole = stream("nousagestream")
            done = b"data: [DONE]\n\n"
            tail = b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done)
            more = done + ("data: " + json.dumps(chunk(0, " more")) + "\n\n").encode()
            connection.sendall(whole[:-len(tail)] + b"%x\r\n%s\r\n0\r\n\r\n" % (len(more), more))
            return
        if model == "nodone":  # the body ends cleanly, [DONE] left out
            done = b"data: [DONE]\n\n"
            whole = stream("nousagestream")
            connection.sendall(whole.replace(b"%x\r\n%s\r\n" % (len(done), done), b""))
            return
        if model in ("bigdone", "latebig"):  # 12 MB at once, then [DONE] and the end
            if model == "latebig":
                time.sleep(2.4)
            data = ("data: " + json.dumps(chunk(0, " word" * 190)) + "\n\n").encode()
            piece = b"%x\r\n%s\r\n" % (len(data), data)
            done = b"data: [DONE]\n\n"
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            for _ in range(120):
                connection.sendall(piece * 100)
            connection.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            return
        if model == "endless":  # events without end, an event every 5 ms
            data = ("data: " + json.dumps(chunk(0, " word" * 20)) + "\n\n").encode()
            piece = b"%x\r\n%s\r\n" % (len(data), data)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            while True:
                connection.sendall(piece)
                time.sleep(0.005)
        if model in ("flood", "lateflood"):  # events without end, as fast as they are read
            if model == "lateflood":
                time.sleep(0.9)
            data = ("data: " + json.dumps(chunk(0, " word" * 20)) + "\n\n").encode()
            piece = b"%x\r\n%s\r\n" % (len(data), data)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            while True:
                connection.sendall(piece * 16)
        if model == "steady":  # 20 MB evenly over 3 s, then [DONE]
            data = ("data: " + json.dumps(chunk(0, "x" * 4000)) + "\n\n").encode()
            piece = b"%x\r\n%s\r\n" % (len(data), data)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            began = time.monotonic()
            for i in range(5000):
                ahead = began + i * 3.0 / 5000 - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
                connection.sendall(piece)
            done = b"data: [DONE]\n\n"
            connection.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            return
        if model == "latedone":  # the body's end comes long after [DONE]
            connection.sendall(late_done_head())
            time.sleep(8)
            connection.sendall(b"0\r\n\r\n")
            return
        if model == "usagestall":  # the usage, then a stall before [DONE]
            def event(e):
                data = ("data: " + json.dumps(e) + "\n\n").encode()
                return b"%x\r\n%s\r\n" % (len(data), data)
            usage = usage_chunk()
            usage["usage"] = {"prompt_tokens": 40000, "completion_tokens": 9000,
                              "total_tokens": 49000}
            finish = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "bad",
                      "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                               b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
                               event(chunk(0, " word" * 6)) + event(finish) + event(usage))
            time.sleep(1.5)
            done = b"data: [DONE]\n\n"
            connection.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            return
        if model == "bigstall":  # two chunks of 120 words each, then a stall before the rest
            connection.sendall(stall_head())
            time.sleep(3)
            connection.sendall(stream("nousagestream").split(b"\r\n\r\n", 1)[1])
            return
        connection.sendall(stream(model) if json.loads(body).get("stream") else answer(model))
    except Exception:
        pass
    finally:
        connection.close()


server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(sys.argv[1])))
server.listen(64)
while True:
    c, _ = server.accept()
    threading.Thread(target=handle, args=(c,), daemon=True).start()
