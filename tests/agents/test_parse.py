import pytest

from astra_sglang.optimize.agents.parse import ParseError, extract_code, extract_json, strip_code

ENTRY = 'ASTRA_ENTRY {\n  return ASTRA_OK;\n}\n'


def test_last_complete_block_with_entry_wins():
    text = f"plan\n```cuda\n// v1\n{ENTRY}```\nhelper:\n```cpp\n// v2\n{ENTRY}```\n```\nno entry here\n```\n"
    assert extract_code(text).startswith("// v2")


def test_bare_fence_and_explicit_entry_name():
    code = extract_code("```\nextern \"C\" int astra_launch(const AstraTensor* t) { return 0; }\n```")
    assert "astra_launch" in code


def test_truncated_answer_is_a_parse_error():
    with pytest.raises(ParseError, match="cut off"):
        extract_code(f"```cuda\n{ENTRY}")


def test_blocks_without_entry_or_no_blocks():
    with pytest.raises(ParseError, match="entry point"):
        extract_code("```cuda\n__global__ void k() {}\n```")
    with pytest.raises(ParseError, match="no fenced code block"):
        extract_code("I would vectorize the loads.")


def test_json_in_fence_text_and_required_keys():
    assert extract_json('```json\n{"shapes": [[1, 2]]}\n```')["shapes"] == [[1, 2]]
    assert extract_json('Sure: {"a": {"b": 1}} and then {"shapes": []} done', ("shapes",)) == {"shapes": []}
    with pytest.raises(ParseError, match="lacks required keys"):
        extract_json('{"shape": [1]}', ("shapes",))
    with pytest.raises(ParseError, match="no valid JSON"):
        extract_json("{'shapes': [[1, 2]],}")


def test_strip_code_keeps_prose():
    text = strip_code(f"Plan: go.\n```cuda\n{ENTRY}```\nDone.")
    assert "Plan: go." in text and "Done." in text and "ASTRA_ENTRY" not in text and "```" not in text
