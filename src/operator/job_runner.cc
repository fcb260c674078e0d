#include "operator/job_runner.h"

#include <filesystem>

namespace bulwark::op {

JobRunner::JobRunner(KubernetesBackendOptions backend, JobRunnerOptions opts)
    : backend_opts_(std::move(backend)), opts_(std::move(opts)) {
  backend_ = std::make_unique<KubernetesBackend>(backend_opts_);
}

JobRunner::~JobRunner() {
  Cancel();
  Join();
}

Status JobRunner::Start() {
  const trainjob::TrainJob& job = backend_opts_.job;
  const std::string dir = opts_.state_dir + "/" + job.ns + "/" + job.name;
  std::error_code ec;
  std::filesystem::create_directories(dir + "/" + run_id(), ec);
  if (ec) return Internal("create " + dir + ": " + ec.message());
  BW_ASSIGN_OR_RETURN(store_, Store::Open(dir + "/bulwark.db"));
  ControllerOptions co;
  co.run_dir = dir + "/" + run_id();
  co.bind_host = opts_.bind_host;
  co.advertise_host = opts_.advertise_host;
  co.agent_connect_timeout_s = opts_.agent_connect_timeout_s;
  co.capacity_wait_s = opts_.capacity_wait_s;
  co.remote_checkpoint_fs = true;
  // The same run id for every leader's runner of this TrainJob: an agent lets only its
  // own job's controller adopt it.
  co.run_id = job.name + "-" + (job.uid.empty() ? std::string("nouid") : job.uid.substr(0, 8));
  co.rendezvous_on_agent = true;
  co.echo_events = false;
  co.image = job.pod.image;
  co.replay = opts_.replay;
  co.on_event = [this](const std::string& reason, const std::string& message, bool warning) {
    Clock* c = opts_.clock ? opts_.clock : SystemClock::Get();
    std::lock_guard<std::mutex> l(mu_);
    events_.push_back({reason, message, warning, c->NowWall()});
  };
  controller_ = std::make_unique<Controller>(job.job, co, backend_.get(), store_.get(),
                                             opts_.clock ? opts_.clock : SystemClock::Get());
  thread_ = std::thread([this] { Run(); });
  return Status::Ok();
}

void JobRunner::Run() {
  Result<RunResult> r = controller_->Run();
  {
    std::lock_guard<std::mutex> l(mu_);
    result_.emplace(std::move(r));
  }
  done_.store(true);
}

void JobRunner::Cancel() {
  if (controller_) controller_->Cancel();
}

void JobRunner::Detach() {
  if (controller_) controller_->Detach();
}

void JobRunner::RequestUpdate(JobSpec next, int verify_steps) {
  if (controller_) controller_->RequestUpdate(std::move(next), verify_steps);
}

void JobRunner::Join() {
  if (thread_.joinable()) thread_.join();
}

Result<RunResult> JobRunner::result() const {
  std::lock_guard<std::mutex> l(mu_);
  if (!result_) return FailedPrecondition("the job's controller is still running");
  return *result_;
}

ControllerStatus JobRunner::Snapshot() const {
  return controller_ ? controller_->Status() : ControllerStatus{};
}

std::deque<RunnerEvent> JobRunner::TakeEvents() {
  std::lock_guard<std::mutex> l(mu_);
  std::deque<RunnerEvent> out;
  out.swap(events_);
  return out;
}

}  // namespace bulwark::op
