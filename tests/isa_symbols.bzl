"""isa_symbols_test: checks kernels compiled once per x86-64 level (v2, v3, v4) into namespaces.

isa_symbols_test(name, libs = {"v2": ":k_v2", "v3": ":k_v3", "v4": ":k_v4"}, prefix = "isa_",
                 fma = True)
copies each variant's static archive out of its cc_library and runs tests/isa_symbols_test.sh on
them: every global symbol of the v3 (v4) archive lies in a namespace `<prefix>v3::`
(`<prefix>v4::`), the v3 code uses 256-bit registers and no 512-bit ones, the v4 code 512-bit
ones, the v2 code neither, and (fma = True) v3 and v4 use FMA.
"""

def isa_symbols_test(name, libs, prefix = "isa_", fma = True):
    args = ["--prefix", prefix] + ([] if fma else ["--no-fma"])
    data = []
    for i, isa in enumerate(["v2", "v3", "v4"]):
        archive = "%s_%s_archive" % (name, isa)
        native.genrule(
            name = archive,
            srcs = [libs[isa]],
            outs = ["%s_%s.a" % (name, isa)],
            cmd = "for f in $(SRCS); do case $$f in *.a) cp $$f $@ ;; esac; done",
            visibility = ["//visibility:private"],
        )
        args += (["--"] if i > 0 else []) + ["$(location :%s)" % archive]
        data.append(":" + archive)
    native.sh_test(
        name = name,
        srcs = ["//tests:isa_symbols_test.sh"],
        args = args,
        data = data,
    )
