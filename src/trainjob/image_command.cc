// ApplyImageConfig (trainjob.h): a TrainJob's command from its image's config.
#include "spec/job_fields.h"
#include "spec/job_spec_schema.h"
#include "trainjob/launcher.h"
#include "trainjob/trainjob.h"

namespace bulwark::trainjob {
namespace {

std::string Quoted(const std::vector<std::string>& argv) {
  std::string s = "[";
  for (size_t i = 0; i < argv.size(); ++i) s += (i ? ", " : "") + Json(argv[i]).dump();
  return s + "]";
}

}  // namespace

Result<std::string> ApplyImageConfig(const registry::ImageConfig& image, Target target,
                                     TrainJob* t) {
  JobSpec& job = t->job;
  if (!job.command.empty()) return std::string();
  const std::string where =
      "image " + image.image +
      (image.manifest_digest.empty() ? std::string() : " (" + image.manifest_digest + ")");
  const std::vector<std::string> argv = registry::ImageCommand(image, job.args);
  if (argv.empty() || argv[0].empty()) {
    return FailedPrecondition("trainjob " + t->ns + "/" + t->name +
                              ": spec.command: not set, "
                              "and " +
                              where +
                              " has neither ENTRYPOINT nor CMD; set command "
                              "(e.g. [python3, train.py]) in the spec");
  }
  // Split as the image has it: the ENTRYPOINT (or CMD's program) is the command.
  Result<Launch> l = StripLauncher(argv, {});
  if (!l.ok()) {
    return InvalidArgument("trainjob " + t->ns + "/" + t->name + ": the command of " + where +
                           ", " + Quoted(argv) + ": " + l.status().message() +
                           "; set command in the spec and call the training script directly");
  }
  const size_t split = l->launcher.empty() ? 1 : l->program_args;
  job.command.assign(l->argv.begin(), l->argv.begin() + static_cast<long>(split));
  job.args.assign(l->argv.begin() + static_cast<long>(split), l->argv.end());
  std::string line = "command from " + where + ": " + Quoted(l->argv);
  if (!l->launcher.empty()) line += " (" + l->launcher + " and its flags removed)";
  if (target == Target::kKubernetes) {
    if (job.workdir.empty() && !image.working_dir.empty()) job.workdir = image.working_dir;
    for (const std::string& kv : image.env) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) continue;
      const std::string name = kv.substr(0, eq);
      if (!spec_internal::IsEnvName(name) || spec_internal::IsReservedEnv(name)) continue;
      job.env.emplace(name, kv.substr(eq + 1));  // the spec's value wins
    }
  }
  return line;
}

}  // namespace bulwark::trainjob
