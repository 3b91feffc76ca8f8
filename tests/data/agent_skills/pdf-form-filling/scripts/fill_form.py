#!/usr/bin/env python3
"""List or fill the interactive fields of a PDF form.

Usage:
    fill_form.py --list form.pdf
    fill_form.py form.pdf mapping.json out.pdf
"""
import json
import sys

from pypdf import PdfReader, PdfWriter
from pypdf.generic import BooleanObject, NameObject


def list_fields(path):
    reader = PdfReader(path)
    root = reader.trailer["/Root"]
    if "/AcroForm" in root and "/XFA" in root["/AcroForm"]:
        print("warning: XFA detected; see references/FORMS.md", file=sys.stderr)
    fields = reader.get_fields() or {}
    for name, f in fields.items():
        states = f.get("/_States_", "")
        print(f"{name}\t{f.get('/FT')}\t{f.get('/V')!r}\t{states}")
    if not fields:
        print("no interactive fields: flat form")


def fill(path, mapping_path, out_path):
    mapping = json.load(open(mapping_path, encoding="utf-8"))
    reader = PdfReader(path)
    writer = PdfWriter()
    writer.append(reader)
    for page in writer.pages:
        writer.update_page_form_field_values(page, mapping, auto_regenerate=False)
    writer._root_object["/AcroForm"][NameObject("/NeedAppearances")] = BooleanObject(True)
    with open(out_path, "wb") as fh:
        writer.write(fh)


if __name__ == "__main__":
    if sys.argv[1] == "--list":
        list_fields(sys.argv[2])
    else:
        fill(*sys.argv[1:4])
