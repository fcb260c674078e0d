/* Bulwark SDK, C ABI (libbulwark.so). Used by the Python module via ctypes.
 *
 * One process-wide client. Every call is thread-safe. Functions returning int
 * return BW_OK (0) or a negative error code (-Code from common/status.h); the
 * message of the calling thread's last error is bw_last_error(). Predicates return
 * 1/0 or a negative error. Functions other than bw_init initialise the client from
 * the environment on first use if bw_init was not called.
 */
#ifndef BULWARK_SDK_BULWARK_C_H_
#define BULWARK_SDK_BULWARK_C_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BW_OK 0
#define BW_ERR_INVALID_ARGUMENT (-1)
#define BW_ERR_NOT_FOUND (-2)
#define BW_ERR_ALREADY_EXISTS (-3)
#define BW_ERR_FAILED_PRECONDITION (-4)
#define BW_ERR_DATA_LOSS (-5)
#define BW_ERR_DEADLINE_EXCEEDED (-6)
#define BW_ERR_UNAVAILABLE (-7)
#define BW_ERR_INTERNAL (-8)
#define BW_ERR_ABORTED (-9)

/* Message of this thread's most recent failed call ("" if none). Valid until the
 * next bw_* call on this thread. */
const char* bw_last_error(void);

/* (Re)initialises from the environment (docs/protocol.md section 3). */
int bw_init(void);
/* Closes the agent channel; a later call re-initialises. */
int bw_shutdown(void);

int bw_rank(void);
int bw_world_size(void);
/* Committed step to resume from, -1 = fresh start (or not initialisable). */
long bw_resume_step(void);
int bw_should_checkpoint(long step);
long bw_skip_from(void);
long bw_skip_to(void);
/* 1 once per inject_nan datagram. */
int bw_poll_injected_nan(void);
/* 1 once per inject_sdc datagram (chaos sdc). */
int bw_poll_injected_sdc(void);
/* The bitwise alignment check: a digest of this rank's parameters after `step`; ranks
 * of one replica set `group` (NULL or "" = the whole job) must report equal ones. */
int bw_report_digest(long step, unsigned long long digest, const char* group);
/* XXH3-64 of the n buffers data[i] (lens[i] bytes each) one after another, as if they
 * were one buffer; a NULL data[i] with lens[i] 0 is empty. No bw_init needed. */
unsigned long long bw_digest(size_t n, const void* const* data, const size_t* lens);

int bw_report_step(long step, double loss, long long tokens);
/* Optional measurements of a step (docs/monitoring.md); NaN = not measured. `size` is
 * sizeof(bw_step_metrics) as the caller was compiled: fields past it are not read, so
 * fields may be appended in later versions. */
typedef struct bw_step_metrics {
  unsigned size;
  double samples, lr, grad_norm, data_wait_s, compute_s, optimizer_s;
  int inferred;  /* the step was inferred by instrumentation (an optimizer step) */
  double busy_s; /* the rank's own work in the step; NaN = its CPU time */
  /* Digests of the rank's random generators after the step and of the step's data,
   * for replay (0 = not reported). */
  unsigned long long rng_digest, data_digest;
  /* How the step's gradients were summed across ranks, for replay: 0 not reported, 1 in
   * a fixed order (bulwark.ordered_allreduce_hook), 2 in an order that may change from
   * run to run (DDP's ring all-reduce over buckets laid out anew per process). */
  int sum_order;
} bw_step_metrics;
int bw_report_step_ex(long step, double loss, long long tokens, const bw_step_metrics* m);
/* Seconds bulwark.metrics.timed waits more per batch (chaos slow_data); 0 = none. */
double bw_data_delay(void);
/* The model's training FLOPs per token, for MFU (> 0). */
int bw_set_model_flops(double flops_per_token);
/* Dense peak FLOPS of one device named `gpu_name` (as NVML names it) for `dtype`
 * ("bf16", "fp16", "fp8", "tf32", "fp32"; NULL = bf16); 0 when not in the table. Needs
 * no bw_init. */
double bw_peak_flops(const char* gpu_name, const char* dtype);
/* The training loop's first step starts now (its step_time is measured from here). */
int bw_mark_step_start(void);

/* In-process recovery (python bulwark.run). bw_declare_in_process: this rank runs
 * its training function in generations (process_group != 0: each generation forms a
 * torch.distributed process group, which wants the job's long-lived store). bw_abort_requested: 1
 * once the agent asked this rank to abandon its generation (drains the rank socket). bw_park: the
 * rank left its generation (`error`: why, "" after an abort). bw_wait_generation: waits up to
 * timeout_s for the next generation and copies its JSON ({"attempt", "env"}) into buf
 * (NUL-terminated); returns its length, BW_ERR_DEADLINE_EXCEEDED on timeout, or
 * BW_ERR_INVALID_ARGUMENT if buf is too small (the message is kept for the next call
 * with a larger buffer). After applying env, call bw_init. bw_finished: the training
 * function returned; the agent stops watching the rank for progress while it exits. */
int bw_declare_in_process(int process_group);
int bw_abort_requested(void);
/* Waits up to timeout_s for an abort (1 once one is pending, 0 if none came); wakes on
 * the abort, not on a timer, and holds no lock while waiting (the abort watcher). */
int bw_wait_abort(double timeout_s);
int bw_park(const char* error);
int bw_finished(void);
int bw_wait_generation(double timeout_s, char* buf, size_t cap);

/* Saves `n` blobs (names[i], data[i], sizes[i]) as this rank's shard of `step`. */
int bw_save(long step, size_t n, const char* const* names, const void* const* data,
            const size_t* sizes);
/* Commits `step` for all ranks (see bulwark::sdk::Client::Commit). */
int bw_commit(long step);

/* Loaded blobs; free with bw_blobs_free. */
typedef struct bw_blobs bw_blobs;
/* Loads committed `step` (-1 = resume step) into *out. */
int bw_load(long step, bw_blobs** out);
size_t bw_blobs_count(const bw_blobs* b);
const char* bw_blobs_name(const bw_blobs* b, size_t i);
const void* bw_blobs_data(const bw_blobs* b, size_t i);
size_t bw_blobs_size(const bw_blobs* b, size_t i);
void bw_blobs_free(bw_blobs* b);

/* Tensor checkpoints (python bulwark.checkpoint). Saves `n` tensors: names[i],
 * dtypes[i] ("float32", "bfloat16", "int64", "uint8", "bool", ...), ndims[i] dims
 * taken in order from the flat `shapes` array, data[i] (nbytes implied), flags[i]
 * bit 0 = replicated across data-parallel ranks. Copies into the memory tier and
 * returns (or writes the disk shard when there is no memory tier). */
int bw_ckpt_save(long step, size_t n, const char* const* names, const char* const* dtypes,
                 const int* ndims, const long long* shapes, const void* const* data,
                 const int* flags);
/* bw_ckpt_save for pieces of sharded tensors (FSDP, DTensor, ShardedTensor): tensor
 * i is the piece, of shape shapes[...], at offsets[...] of a tensor of shape
 * global_shapes[...]; both arrays are laid out like `shapes` (ndims[i] entries per
 * tensor, in order). Each rank saves its own piece under the same name; a loader
 * reads any region of the global tensor (bw_load_piece). A tensor whose global
 * shape is its shape at offsets 0 is stored whole. A piece smaller than its global
 * tensor must not be flagged replicated. global_shapes and offsets NULL: every
 * tensor whole (= bw_ckpt_save). */
int bw_ckpt_save_sharded(long step, size_t n, const char* const* names, const char* const* dtypes,
                         const int* ndims, const long long* shapes, const long long* global_shapes,
                         const long long* offsets, const void* const* data, const int* flags);

/* An open checkpoint step on one tier (see bulwark::sdk::Client::OpenLoad). */
typedef struct bw_reader bw_reader;
int bw_ckpt_open(long step, int min_tier, bw_reader** out);
const char* bw_load_tier(const bw_reader* l); /* "memory", "disk", "shared" */
long bw_load_step(const bw_reader* l);
size_t bw_load_count(const bw_reader* l);
const char* bw_load_name(const bw_reader* l, size_t i);
const char* bw_load_dtype(const bw_reader* l, size_t i);
int bw_load_ndim(const bw_reader* l, size_t i);
/* Dim d of tensor i as saved: its piece's shape, the global tensor's shape, and the
 * piece's offset in it (a whole tensor: global = shape, offsets 0). -1 if out of range. */
long long bw_load_dim(const bw_reader* l, size_t i, int d);
long long bw_load_global_dim(const bw_reader* l, size_t i, int d);
long long bw_load_offset(const bw_reader* l, size_t i, int d);
size_t bw_load_nbytes(const bw_reader* l, size_t i);
/* Reads tensor i (verified) into dst, which must hold exactly its nbytes. */
int bw_load_read(bw_reader* l, size_t i, void* dst, size_t nbytes);
/* Reads the region of tensor `name` of the open step that a piece of shape
 * shape[0..ndim) at offsets[0..ndim) of a tensor of shape global_shape[0..ndim)
 * covers, as `dtype`, into dst (exactly the piece's bytes, row-major), whatever
 * ranks, world size and sharding saved it: the memory tier serves the piece this
 * rank saved; any other region is stitched from the pieces on the file tiers
 * (bulwark::sdk::LoadSession::Load). global_shape NULL = shape (the whole tensor),
 * offsets NULL = 0s. BW_ERR_INVALID_ARGUMENT for another dtype or global shape
 * than saved, BW_ERR_NOT_FOUND if no tier holds the region; the message names the
 * tensor and the shapes. */
int bw_load_piece(bw_reader* l, const char* name, const char* dtype, int ndim,
                  const long long* shape, const long long* global_shape, const long long* offsets,
                  void* dst, size_t nbytes);
void bw_load_close(bw_reader* l);

#ifdef __cplusplus
}
#endif

#endif /* BULWARK_SDK_BULWARK_C_H_ */
