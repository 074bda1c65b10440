"""benchmarks/sass_diff.py's parsing of `cuobjdump -sass` (no GPU, no cuobjdump needed)."""


def _dump(hash_: str, second_op: str) -> str:
    # Two files' builds: the anonymous-namespace hash differs, addresses and encodings are per line.
    name = f"_ZN41_GLOBAL__N__{hash_}_9_kernel_cu_8fbcd36619silu_and_mul_kernelI6__halfLi8ELi64ELi1ELb1EEEvPKT_"
    return (f"\n\t\tFunction : {name}\n"
            "        /*0000*/                   LDC R1, c[0x0][0x28] ;            /* 0x00000a00ff017b82 */\n"
            f"        /*0010*/                   {second_op} ;                      /* 0x000fe20000000f00 */\n"
            "\t\t..........\n")


def test_same_code_in_two_files_compares_equal_and_a_changed_instruction_does_not(bench_script):
    sass_diff = bench_script("sass_diff")
    a, b = sass_diff.parse(_dump("6db16129", "EXIT")), sass_diff.parse(_dump("b6750a33", "EXIT"))
    assert list(a) == list(b) and len(a) == 1
    assert next(iter(a.values())) == ["LDC R1, c[0x0][0x28]", "EXIT"]
    assert a == b
    assert sass_diff.parse(_dump("b6750a33", "BRA 0x10")) != a


def test_rename_maps_a_new_template_parameter_onto_the_old_name(bench_script):
    sass_diff = bench_script("sass_diff")
    new = "merge_kernelI13__nv_bfloat16Li8ELi128ELi1ELb1ELi2EEEvPKT_"
    assert sass_diff.rename(new, ["ELi2EEEv=EEEv"]) == "merge_kernelI13__nv_bfloat16Li8ELi128ELi1ELb1EEEvPKT_"
    assert sass_diff.rename(new, []) == new


def test_a_revision_side_is_built_with_that_revisions_headers(bench_script, tmp_path):
    sass_diff = bench_script("sass_diff")
    path, headers = sass_diff.source("HEAD:patches/silu_and_mul/kernel.cu", tmp_path, "old.cu")
    assert "act_mul_kernel" in path.read_text()  # the committed file, not the working tree's
    assert sorted(p.name for p in headers.iterdir()) == sorted(sass_diff.build.HEADERS)
    assert "ASTRA_ENTRY" in (headers / "astra_abi.h").read_text()
    here = tmp_path / "k.cu"
    here.write_text("// a file\n")
    assert sass_diff.source(str(here), tmp_path, "new.cu") == (here, None)
