#include "tools/ckpt_cli.h"

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "framework/byte_size.h"
#include "framework/mpi/mpi_communicator.h"
#include "framework/rank_env.h"
#include "framework/status.h"
#include "tools/ckpt_commands.h"

namespace shardema::tools {
namespace {

constexpr char kExitCodes[] =
    "Exit codes: 0 success, 1 other error, 2 usage error or invalid argument, 3 not found\n"
    "(missing checkpoint, step, slot or file), 4 data loss (corrupt or truncated files, checksum\n"
    "mismatch, inconsistent manifest).";

constexpr char kDirHelp[] =
    "a --ckpt-dir root (its latest committed checkpoint, or step_S with --step) or one "
    "checkpoint's directory (step_N/)";

constexpr char kSubcommands[] = "inspect, verify, export, reshard, diff, posthoc";

struct Raw {
  std::string dir, dir_b, slot = kMasterSlot, dtype = "f32", out, max_file_size = "0", sigma_rel,
                          layout;
  int64_t step = -1, step1 = -1, step2 = -1, step_max = -1;
  int world = 0;
  bool json = false, all = false, no_buffers = false, no_progress = false, slots_only = false;
  bool print_coefficients = false;
};

constexpr char kNoProgressHelp[] =
    "(global, accepted anywhere) never draw the progress bar (drawn on stderr when it is a "
    "terminal)";

// The global flags, on the main command and on every subcommand, so they are accepted before or
// after the subcommand name and listed in every --help.
void AddGlobalFlags(CLI::App* app, Raw& raw) {
  app->add_flag("--no-progress", raw.no_progress, kNoProgressHelp);
}

CLI::Option* AddStep(CLI::App* sub, Raw& raw) {
  return sub->add_option("--step", raw.step,
                         "under a root DIR: the checkpoint of step S instead of the latest");
}

bool IsKnownSubcommand(const std::string& s) {
  for (const char* k : {"inspect", "verify", "export", "reshard", "diff", "posthoc"}) {
    if (s == k) return true;
  }
  return false;
}

// Options shared by export and posthoc: --dtype and --max-file-size.
void AddOutputFormat(CLI::App* sub, Raw& raw) {
  sub->add_option("--dtype", raw.dtype,
                  "dtype of the exported tensors: f32, bf16 or f16 (round to nearest even)")
      ->capture_default_str();
  sub->add_option(
         "--max-file-size", raw.max_file_size,
         "split into OUT-0000k-of-0000K.safetensors files of at most this many data bytes plus "
         "OUT.safetensors.index.json (published all or nothing when OUT's folder holds nothing "
         "else, checkpoint/export.h); B, KB, MB, GB (x1000) or KiB, MiB, GiB and K, M, G "
         "(x1024); 0 = one file")
      ->capture_default_str();
}

// Parses --dtype and --max-file-size.
Status ParseOutputFormat(const Raw& raw, DType* dtype, uint64_t* max_file_size) {
  StatusOr<DType> d = ParseDType(raw.dtype);
  if (!d.ok()) return d.status().WithContext("--dtype");
  ASSIGN_OR_RETURN(*max_file_size, ParseByteSize(raw.max_file_size, "--max-file-size"));
  *dtype = *d;
  return Status::Ok();
}

// posthoc: one process, or every rank of `mpirun -np W ckpt posthoc ...` (MPI only then).
Status RunPosthoc(const Raw& raw, bool step_max_given, const CommandIo& io, bool* quiet) {
  PosthocCommandOptions o;
  o.dir = raw.dir;
  o.out = raw.out;
  o.print_coefficients = raw.print_coefficients;
  o.include_buffers = !raw.no_buffers;
  if (step_max_given) o.step_max = raw.step_max;
  RETURN_IF_ERROR(ParseOutputFormat(raw, &o.dtype, &o.max_file_size));
  ASSIGN_OR_RETURN(o.sigma_rels, ParseSigmaRelList(raw.sigma_rel));
  ASSIGN_OR_RETURN(RankEnv env, DiscoverRankEnv());
  if (env.world_size == 1) return Posthoc(o, io, nullptr);
  ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> comm, MpiCommunicator::Create());
  *quiet = comm->rank() != 0;  // every rank gets the same status: rank 0 reports it
  Status s = Posthoc(o, io, comm.get());
  comm.reset();
  Status fin = MpiCommunicator::FinalizeMpi();
  return s.ok() ? fin : s;
}

}  // namespace

int RunCkptCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err,
               bool progress) {
  Raw raw;
  CLI::App app(
      "ckpt: inspect, verify, export, reshard and compare shardema checkpoints, post-hoc EMA "
      "(format: checkpoint/FORMAT.md)",
      "ckpt");
  app.require_subcommand(1);
  app.footer(kExitCodes);
  AddGlobalFlags(&app, raw);

  CLI::App* inspect =
      app.add_subcommand("inspect",
                         "step, world size, units, tensors and shapes, slots with dtypes, EMA "
                         "hyperparameters and counters, "
                         "sizes per slot / rank / total, meta (reads the manifest only)");
  inspect->add_option("DIR", raw.dir, kDirHelp)->required();
  CLI::Option* inspect_step = AddStep(inspect, raw);
  inspect->add_flag("--json", raw.json, "print everything as one JSON object");
  inspect->footer(kExitCodes);

  CLI::App* verify = app.add_subcommand(
      "verify",
      "check every checksum of every file (manifest, rank-file headers, every chunk, whole files) "
      "and the meta's schema (what resume reads); exits 0 only if the checkpoint is intact, else "
      "prints every problem naming the file or the meta field");
  verify->add_option("DIR", raw.dir, kDirHelp)->required();
  CLI::Option* verify_step = AddStep(verify, raw);
  CLI::Option* verify_all =
      verify->add_flag("--all", raw.all, "verify every committed checkpoint of the root DIR");
  verify_all->excludes(verify_step);
  verify->footer(kExitCodes);

  CLI::App* exp = app.add_subcommand("export",
                                     "write one slot (params, an EMA slot, ...) as a consolidated "
                                     "safetensors state_dict, streamed "
                                     "in bounded memory");
  exp->add_option("DIR", raw.dir, kDirHelp)->required();
  exp->add_option("--slot", raw.slot,
                  "the slot to export: params (the live weights) or an EMA slot (ema_...); an "
                  "EMA slot that never started (num_updates=0, before its start_step) is refused "
                  "(exit 1)")
      ->capture_default_str();
  AddOutputFormat(exp, raw);
  exp->add_option("-o,--output", raw.out, "OUT.safetensors")->required();
  CLI::Option* export_step = AddStep(exp, raw);
  exp->add_flag("--no-buffers", raw.no_buffers, "leave out the replicated buffers");
  exp->add_option("--layout", raw.layout,
                  "a layout the checkpoint defines (meta export_layouts), e.g. train_gpt's hf: "
                  "Hugging Face GPT2LMHeadModel (its Conv1D weights transposed, [in, out])");
  exp->footer(kExitCodes);

  CLI::App* reshard = app.add_subcommand(
      "reshard",
      "write a copy of the checkpoint at another world size into a new root (bit-exact per slot)");
  reshard->add_option("DIR", raw.dir, kDirHelp)->required();
  reshard
      ->add_option(
          "--world", raw.world,
          "the new world size M: 1 <= M <= the element count of the checkpoint's largest unit "
          "(ckpt inspect lists the units)")
      ->required();
  reshard
      ->add_option(
          "-o,--output", raw.out,
          "the new root DIR2 (gets step_N/ and latest; must not be, contain or be inside DIR; "
          "written under a temporary name and committed like a save: an interrupted run leaves "
          "nothing committed and a re-run completes it)")
      ->required();
  CLI::Option* reshard_step = AddStep(reshard, raw);
  reshard->footer(kExitCodes);

  CLI::App* diff = app.add_subcommand("diff",
                                      "compare two checkpoints: per slot max abs / max rel "
                                      "difference over the full unsharded slot (any "
                                      "world sizes), step, buffer and meta differences");
  diff->add_option("DIR1", raw.dir, kDirHelp)->required();
  diff->add_option("DIR2", raw.dir_b, kDirHelp)->required();
  CLI::Option* diff_step =
      diff->add_option("--step", raw.step, "under root DIRs: step S on both sides");
  CLI::Option* diff_step1 =
      diff->add_option("--step1", raw.step1, "under a root DIR1: its step S (overrides --step)");
  CLI::Option* diff_step2 =
      diff->add_option("--step2", raw.step2, "under a root DIR2: its step S (overrides --step)");
  diff->add_flag("--json", raw.json, "print the report as one JSON object");
  diff->add_flag(
      "--slots-only", raw.slots_only,
      "decide identical/different by the slot values alone (step, buffers and meta are still "
      "reported, as notes)");
  diff->footer(std::string(
      "Run-location fields of the meta (paths such as trainer.config.ckpt_dir, data, "
      "init) and its world sizes are listed as notes, not differences, so two bit-identical runs "
      "in different folders, or on different world sizes, compare identical.\nExit codes: 0 "
      "identical, 1 different, 2 usage error or "
      "invalid argument, 3 not found, 4 data loss (corrupt or truncated files)."));

  CLI::App* posthoc = app.add_subcommand(
      "posthoc",
      "post-hoc EMA (EDM2): the EMA of any sigma_rel as a least-squares combination of the run's "
      "power-function EMA snapshots (--ema-snapshot-every), streamed in bounded memory; also under "
      "mpirun -np W (each rank combines its shard; same bytes)");
  posthoc
      ->add_option("ROOT", raw.dir,
                   "the run's --ckpt-dir (holding ema_snapshots/) or its ema_snapshots/")
      ->required();
  posthoc
      ->add_option(
          "--sigma-rel", raw.sigma_rel,
          "S[,S2...]: relative standard deviations to reconstruct, each in (0, 0.2887); several "
          "values write OUT-sigma_rel_<S>.safetensors each")
      ->required();
  posthoc->add_option("-o,--output", raw.out, "OUT.safetensors")->required();
  AddOutputFormat(posthoc, raw);
  CLI::Option* step_max = posthoc->add_option(
      "--step-max", raw.step_max,
      "use the snapshots at or before step N (the newest of them is the target time)");
  posthoc->add_flag(
      "--print-coefficients", raw.print_coefficients,
      "print the solve: target step and time, and per output the coefficient of every snapshot "
      "profile and the profile fit error (|| combination - target || / || target || of the EMA "
      "weight profiles: 0 reproduces the target exactly; above 0.1 it warns)");
  posthoc->add_flag("--no-buffers", raw.no_buffers, "leave out the replicated buffers");
  posthoc->footer(kExitCodes);
  for (CLI::App* sub : {inspect, verify, exp, reshard, diff, posthoc}) AddGlobalFlags(sub, raw);

  // An unknown subcommand gets a clearer message than CLI11's "arguments were not expected".
  if (argc > 1 && argv[1][0] != '-' && !IsKnownSubcommand(argv[1])) {
    err << "ckpt: unknown subcommand '" << argv[1] << "' (expected one of " << kSubcommands
        << "; see ckpt --help)\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string where = "ckpt";
    for (const CLI::App* s : app.get_subcommands()) where += " " + s->get_name();
    err << where << ": " << e.what() << "\n(see " << where << " --help)\n";
    return 2;
  }

  CommandIo io{&out, &err, progress && !raw.no_progress};
  const std::string name = app.get_subcommands().front()->get_name();
  auto step_of = [&](CLI::Option* o) {
    return o->count() ? std::optional<int64_t>(raw.step) : std::nullopt;
  };
  Status st;
  int ok_code = 0;
  bool quiet = false;  // a rank other than 0 of a distributed posthoc
  if (name == "inspect") {
    st = Inspect(InspectOptions{raw.dir, step_of(inspect_step), raw.json}, io);
  } else if (name == "verify") {
    st = Verify(VerifyOptions{raw.dir, step_of(verify_step), raw.all}, io);
  } else if (name == "export") {
    ExportCommandOptions o;
    o.dir = raw.dir;
    o.step = step_of(export_step);
    o.slot = raw.slot;
    o.out = raw.out;
    o.include_buffers = !raw.no_buffers;
    o.layout = raw.layout;
    st = ParseOutputFormat(raw, &o.dtype, &o.max_file_size);
    if (st.ok()) st = Export(o, io);
  } else if (name == "posthoc") {
    st = RunPosthoc(raw, step_max->count() > 0, io, &quiet);
  } else if (name == "reshard") {
    st = Reshard(ReshardCommandOptions{raw.dir, step_of(reshard_step), raw.world, raw.out}, io);
  } else {
    auto side = [&](CLI::Option* own, int64_t value) {
      return own->count() ? std::optional<int64_t>(value) : step_of(diff_step);
    };
    DiffCommandOptions o{raw.dir,
                         raw.dir_b,
                         raw.json,
                         raw.slots_only,
                         side(diff_step1, raw.step1),
                         side(diff_step2, raw.step2)};
    StatusOr<bool> identical = Diff(o, io);
    st = identical.status();
    if (identical.ok() && !*identical) ok_code = 1;
  }
  if (!st.ok()) {
    if (!quiet) err << "ckpt " << name << ": " << st.ToString() << "\n";
    return ExitCodeFor(st);
  }
  return ok_code;
}

}  // namespace shardema::tools
