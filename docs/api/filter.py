#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Doxygen's INPUT_FILTER for include/weft/*.h: reads the headers' comments
as they are written (plain C comments, one paragraph per declaration, a
trailing comment per struct field) as documentation, so the headers need no
Doxygen markup.

- The file's first comment (after the SPDX line) becomes the file's
  documentation (\\file), so its functions and macros are listed and checked.
- A comment on a line of its own documents what follows (/** ... */).
- A comment after code on the same line documents that code (/**< ... */):
  a struct field, an enum constant, a macro.
- A struct's "/* public */" and "/* private */" labels (with or without
  words after a colon) open Doxygen's public and private sections: private
  fields are left out of the reference, like C++'s private members.
- A trailing comment after a declaration of several names ("int a, b;")
  documents each of them, as a member group too.
- A comment on a line of its own (plain or already /** ... */) over
  several declarations with no blank line between them
  (weft_ctx_fire_*, a macro and the function it calls) documents each of them: they become
  a Doxygen member group (DISTRIBUTE_GROUP_DOC).
- Text Doxygen would take for markup is escaped: a backslash ("\\r\\n"),
  a placeholder in angle brackets ("<prog>", "<weft/cli.h>") and "--"
  (an en dash to Doxygen); the headers use no Doxygen commands.
- A block set off by a blank line and indented (a usage table, an example,
  the pipeline's diagram) is indented to four spaces, Markdown's code
  block, so Doxygen prints it as it is instead of filling a paragraph.
- The SPDX line is left alone.

Only comments change, never a line break, so Doxygen's warnings name
the header's own line numbers. Usage: filter.py HEADER (writes to stdout).
"""
import re
import sys

PLACEHOLDER = re.compile(r'<(/?[A-Za-z][^<>\s]*)>')
QUOTED = re.compile(r'("[^"\n]*")')
# A comment line " * " indented by a space or more, and a blank one.
INDENTED = re.compile(r'^(\s*\* )( +)\S')
BLANK = re.compile(r'^\s*\*?\s*$')
# A declaration of several names: "type a, b;" (no parentheses: not a
# function pointer or a call).
MULTI = re.compile(r'^[^(){}]*\w\s*,\s*\w[^(){}]*;\s*$')


def escape_text(text):
    """Plain prose: a backslash, a placeholder in angle brackets and "--"
    (Doxygen's en dash) kept as written."""
    text = text.replace('\\', '\\\\').replace('--', '\\--')
    return PLACEHOLDER.sub(lambda m: '\\<' + m.group(1) + '\\>', text)


def escape_prose(text):
    """Prose with what Doxygen reads as markup escaped, but in `code spans`
    and "quoted text", which Doxygen prints as they are."""
    parts = text.split('`')
    for k in range(0, len(parts), 2):
        pieces = QUOTED.split(parts[k])
        for q in range(0, len(pieces), 2):
            pieces[q] = escape_text(pieces[q])
        parts[k] = ''.join(pieces)
    return '`'.join(parts)


def escape(body):
    """The comment's text for Doxygen: the prose escaped (escape_prose);
    lines set off by a blank line and indented by a space or more (a
    usage table, an example) indented to at least four, Markdown's code
    block, which Doxygen prints as it is instead of filling a paragraph."""
    lines = body.split('\n')
    out, prose = [], []
    k = 0
    while k < len(lines):
        run = []
        while (k + len(run) < len(lines) and
               INDENTED.match(lines[k + len(run)])):
            run.append(lines[k + len(run)])
        if run and k > 0 and BLANK.match(lines[k - 1]):
            if prose:
                out.append(escape_prose('\n'.join(prose)))
            prose = []
            least = min(len(INDENTED.match(l).group(2)) for l in run)
            pad = ' ' * max(0, 4 - least)
            for l in run:
                lead = INDENTED.match(l).group(1)
                out.append(lead + pad + l[len(lead):])
            k += len(run)
        else:
            prose.append(lines[k])
            k += 1
    if prose:
        out.append(escape_prose('\n'.join(prose)))
    return '\n'.join(out)


def group_end(text, j):
    """Where a member group over the declarations after a comment ending
    at `j` closes (the end of the run's last line), or None when the run
    holds one declaration or a brace (a struct, an initializer)."""
    lines = []
    at = text.find('\n', j) + 1
    while 0 < at < len(text):
        nl = text.find('\n', at)
        nl = len(text) if nl < 0 else nl
        line = text[at:nl]
        if line.strip() == '' or line.lstrip().startswith(('/*', '//', '}')):
            break  # a blank line, a comment, or the struct's end
        lines.append((line, nl))
        at = nl + 1
    if any('{' in l or '}' in l for l, _ in lines):
        return None
    decls = sum(1 for l, _ in lines
                if l.rstrip().endswith(';') or l.lstrip().startswith('#define'))
    return lines[-1][1] if decls > 1 else None


def label(body):
    """'public' or 'private' when the comment is a struct's section label."""
    word = body.strip().split(':')[0]
    return word if word in ('public', 'private') else None


def convert(text):
    out = []
    i, n = 0, len(text)
    line_start = 0  # index where the current line begins
    file_doc_done = False
    closes = set()  # where member groups end
    out_line = 0  # where the current line begins in `out`
    while i < n:
        c = text[i]
        if c == '\n':
            out.append(c)
            if i in closes:  # at the start of the next line: after a
                out.append('/**@}*/ ')  # #define, Doxygen would miss it
            i += 1
            line_start = i
            out_line = len(out)
        elif c in '"\'':  # a string or character literal, copied whole
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif text.startswith('//', i):  # a line comment, copied whole
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(text[i:j])
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            body = escape(text[i + 2:j - 2])
            own_line = text[line_start:i].strip() == ''
            doc = body[:1] in ('*', '!')  # already written for Doxygen
            text_of = body[1:] if doc else body
            if 'SPDX-License-Identifier' in body:
                out.append(text[i:j])
            elif not own_line:
                out.append('/*' + body + '*/' if doc else '/**<' + body + '*/')
                if MULTI.search(text[line_start:i]):  # "int a, b; /* x */"
                    out.insert(out_line, '/**@{*/ ')
                    closes.add(text.find('\n', j))
            elif label(body):
                out.append('/** @' + label(body) + 'section' +
                           '\n' * body.count('\n') + ' */')
            elif not file_doc_done:
                out.append('/**' + text_of + ' \\file */')
                file_doc_done = True
            else:
                end = group_end(text, j)
                if end is not None:
                    closes.add(end)
                    out.append('/**@{*/ ')
                out.append('/**' + text_of + '*/')
            if '\n' in text[i:j]:
                line_start = text.rfind('\n', i, j) + 1
            i = j
        else:
            out.append(c)
            i += 1
    return ''.join(out)


if __name__ == '__main__':
    with open(sys.argv[1], encoding='utf-8') as f:
        sys.stdout.write(convert(f.read()))
