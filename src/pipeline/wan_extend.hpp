// Video extension (vinf extend, generate --continue): an existing video continued by an
// image-to-video pipeline from its last frame, and the two joined. One link of a chain: OUT/ holds
// last-frame.png (the conditioning picture), segment/ (the image-to-video run itself, with its
// latents, checkpoints and run.json: a stopped link resumes there with --resume auto), video.mp4 and
// contact.png (the input's frames, then the segment's after its first, which stands for the input's
// last), extend.json (what was joined, the seam), and with --evaluate the seam's measures at the
// join. The next link takes OUT/video.mp4 as its input.
#pragma once

#include "job/job.hpp"
#include "pipeline/generate_spec.hpp"
#include "pipeline/outcome.hpp"
#include "pipeline/video_pipeline.hpp"

namespace vinf::pipeline {

// o.extend: the video to continue (a file ffmpeg reads, or a folder of frames); o.model an
// image-to-video Wan pipeline; o.frames the segment's frames (its first is the input's last). The
// size is the input's unless --video.height / --video.width were given (then the input's frames
// are resized with Lanczos for the join as for the model). Collective over the job; InputError on
// every rank for bad input. `family`: the image-to-video pipeline that runs the segment (its models
// kept from one link to the next of a job list).
VideoOutcome extend_video(GenerateSpec& o, job::Job& job, VideoPipeline& family);

}  // namespace vinf::pipeline
