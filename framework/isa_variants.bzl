"""isa_variants_library: sources compiled once per x86-64 level, for framework/cpu_isa.h.

isa_variants_library(name, srcs, prefix, hdrs = [], deps = [], copts = [], fma = True,
                     symbols_test = name + "_symbols_test")
defines
  name_v2, name_v3, name_v4  cc_library(srcs, copts = copts + ISA_VARIANT_COPTS[v] +
                             ["-DSHARDEMA_ISA_NS=<prefix>_<v>"]): each source wraps its
                             definitions in `namespace SHARDEMA_ISA_NS { ... }`;
  name                       cc_library(hdrs) over the three plus //framework:cpu_isa: depend on it
                             and call the variants with SHARDEMA_ISA_DISPATCH(prefix, fn, ...);
  symbols_test               an sh_test (framework/isa_symbols_test.sh) on the three static
                             archives: every global symbol of the v3 (v4) archive lies in
                             `<prefix>_v3::` (`_v4::`) or Eigen's renamed namespace, the v3 code
                             uses 256-bit registers and no 512-bit ones, the v4 code 512-bit ones,
                             the v2 code neither, and (fma = True) v3 and v4 use FMA.
Other cc_library arguments (e.g. local_defines, linkopts) go to the three variant libraries.
"""

ISA_VARIANT_COPTS = {
    "v2": [],
    # -DEigen=EigenVn: Eigen's inline functions compiled with AVX2/AVX-512 get names of their own,
    # so none can stand in for the portable copies the rest of the program links.
    "v3": ["-march=x86-64-v3", "-DEigen=EigenV3"],
    # -mprefer-vector-width=512: 16-wide loops whatever -mtune says (GCC 12's generic tuning picks
    # them too). GCC 12 flags its own _mm512_undefined_*() of avx512fintrin.h (inside Eigen's and
    # XXH3's AVX-512 code) as (maybe) used uninitialized: a false positive, silenced here only.
    "v4": [
        "-march=x86-64-v4",
        "-mprefer-vector-width=512",
        "-DEigen=EigenV4",
        "-Wno-uninitialized",
        "-Wno-maybe-uninitialized",
    ],
}

ISA_VARIANTS = ["v2", "v3", "v4"]

def isa_variants_library(name, srcs, prefix, hdrs = [], deps = [], copts = [], fma = True,
                         symbols_test = None, visibility = None, **kwargs):
    for isa in ISA_VARIANTS:
        native.cc_library(
            name = "%s_%s" % (name, isa),
            srcs = srcs + hdrs,
            copts = copts + ISA_VARIANT_COPTS[isa] + ["-DSHARDEMA_ISA_NS=%s_%s" % (prefix, isa)],
            deps = deps + ["//framework:cpu_isa"],
            visibility = ["//visibility:private"],
            **kwargs
        )
    native.cc_library(
        name = name,
        hdrs = hdrs,
        deps = ["//framework:cpu_isa"] + [":%s_%s" % (name, isa) for isa in ISA_VARIANTS],
        visibility = visibility,
    )
    test = symbols_test or name + "_symbols_test"
    args = ["--prefix", prefix + "_"] + ([] if fma else ["--no-fma"])
    data = []
    for i, isa in enumerate(ISA_VARIANTS):
        archive = "%s_%s_archive" % (test, isa)
        native.genrule(
            name = archive,
            srcs = [":%s_%s" % (name, isa)],
            outs = ["%s_%s.a" % (test, isa)],
            cmd = "for f in $(SRCS); do case $$f in *.a) cp $$f $@ ;; esac; done",
            visibility = ["//visibility:private"],
        )
        args += (["--"] if i > 0 else []) + ["$(location :%s)" % archive]
        data.append(":" + archive)
    native.sh_test(
        name = test,
        srcs = ["//framework:isa_symbols_test.sh"],
        args = args,
        data = data,
    )
