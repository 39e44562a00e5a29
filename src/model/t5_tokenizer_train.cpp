#include "model/t5_tokenizer_train.hpp"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <filesystem>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"
#include "io/atomic_file.hpp"

namespace vinf::model {

namespace {

// The training text: one sentence a line, written for this purpose. Every letter, digit and the
// common punctuation appear, so that most English prompts encode without `<unk>`.
constexpr std::string_view kText = R"text(
A small red kite climbs over the green hill while two children run after its long tail.
The wind turns, the string pulls tight, and the kite dips toward the river before it rises again.
A beagle swims in the ocean near a reef of coral, paddling hard against the slow blue waves.
Fish in yellow and orange stripes dart between the rocks as sunlight moves across the sand below.
At dawn a fishing boat leaves the harbor; gulls follow it, calling over the quiet grey water.
An old man in a wool coat walks his dog along the beach and stops to watch the tide come in.
In the city, rain falls on a crowded street at night, and the neon signs shine in every puddle.
Taxis splash past a woman holding a black umbrella, and steam rises from a grate near the corner.
A train crosses a bridge high above a valley filled with fog, its windows glowing warm and gold.
Snow drifts through a pine forest; a fox pauses, lifts one paw, and listens to the silence.
Far away, a wolf howls under the full moon, and the sound rolls across the frozen lake.
A chef chops onions, peppers and fresh herbs on a wooden board, then tosses them into a hot pan.
Flames jump from the pan as he shakes it, and the kitchen fills with the smell of garlic and butter.
A girl with curly brown hair plays the violin in a sunny park while pigeons gather at her feet.
Her friend records the song with a phone, laughing, then zooms in slowly on the strings.
Horses gallop across a wide desert, kicking up clouds of dust that glow orange in the evening light.
A rocket lifts off from the launch pad, and thick white smoke spreads over the flat coast.
The camera follows it up through thin clouds until it becomes a bright point in the dark sky.
Two astronauts float inside the station, turning slowly, as the blue planet passes by the window.
A cat sleeps on a windowsill, its tail twitching, while raindrops slide down the glass.
Then it wakes, stretches, jumps to the floor, and chases a ball of yarn under the table.
Waves crash against tall cliffs, and a lighthouse sweeps its beam over the stormy sea.
A hummingbird hovers beside a purple flower, wings moving so fast they blur into a soft haze.
Bees drift from blossom to blossom in a garden full of roses, tulips and tall sunflowers.
A skateboarder rolls down a concrete ramp, spins in the air, and lands with a loud clap.
Leaves of red, brown and yellow swirl around a bench in an empty autumn park.
An eagle spreads its wings above a canyon and glides along the warm currents of air.
Children build a sandcastle with towers and a moat, and a wave slowly washes one wall away.
A panda chews bamboo in a misty grove, looking calmly at the camera between bites.
Lanterns float up into the night over a river, hundreds of small lights rising together.
A clock tower strikes twelve; the hands move, the bells ring, and birds scatter from the roof.
Cars wait at a crossing as a parade of drums, flags and dancers fills the wide avenue.
A potter shapes wet clay on a spinning wheel, her hands pressing gently as the bowl grows.
Mountains stand under a clear sky, and a climber reaches the summit, raising both arms.
A waterfall pours into a deep pool, and a rainbow hangs in the spray for a moment.
In a quiet library, a boy turns the pages of a huge book of maps and ancient kings.
Robots assemble cars on a bright factory floor, each arm turning, welding and lifting in time.
A jellyfish pulses through dark water, glowing pink and violet, trailing long thin threads.
Farmers harvest wheat at sunset, and a tractor moves slowly across the golden field.
A tiny turtle crawls from its nest toward the sea, leaving small tracks in the wet sand.
Fireworks burst above the harbor in green, silver and red, reflected in the calm water below.
A jazz band plays in a smoky club; the drummer smiles, and the trumpet takes a long solo.
Quick zebras jog by, vexing the keeper who must fix six broken gates before the zoo opens.
The picture is sharp, detailed and cinematic, shot on a wide lens with soft, natural colors.
It was filmed in 4K at 24 or 30 frames per second, with 1, 2, 3, 5, 7, 8 and 9 takes per scene.
Is the shot blurry, grainy, dark, or overexposed? Then try again: slow down, and hold it steady!
Low quality, bad hands, extra fingers, ugly faces, jpeg artifacts and watermarks are avoided.
"Look up," she said, pointing at the kite; it was 100% worth the climb (and the wet shoes).
Q: Where does the road go? A: Over the hills, past the farm & the mill, to the sea.
Email: kite@example.com, price $20, area #5, score 3/4, time 10:45, temp ~12 degrees, size [1x2] {ok} <fine> + - = * _ | \ ^ `quote`.
A young woman rides a bicycle through a village of white houses with blue doors and shutters.
She rings the bell, waves to a baker, and coasts down a narrow lane toward the harbor.
Inside the bakery, loaves of bread come out of the oven, brown and crisp, dusted with flour.
A grandmother knits a scarf by the fire, and her grandson reads aloud from a comic book.
Outside, the storm grows stronger; branches scrape the roof and thunder shakes the windows.
By morning the sky is clean and pale, and drops of water sparkle on every blade of grass.
A herd of elephants walks slowly to a muddy river, the calves staying close to their mothers.
They spray water over their backs, trumpet loudly, and roll in the cool brown mud.
Giraffes stretch their necks to reach the highest leaves, chewing lazily in the afternoon heat.
A lion lies in the shade of an acacia tree, watching the plain with half-closed eyes.
On a busy market street, vendors sell spices, melons, fabrics, lamps and painted bowls.
A man bargains over a carpet, shaking his head, then smiles and shakes the seller's hand.
Steam curls from cups of tea as friends talk at a small table under a striped awning.
A surfer paddles out beyond the breaking waves, waits, then stands and carves along a glassy wall.
The wave curls over him, and for a second he disappears inside a tunnel of bright water.
Deep in the jungle, a waterfall thunders, and parrots in green and scarlet shriek overhead.
A monkey swings from vine to vine, grabs a mango, and sits on a branch to eat it.
Under the sea, a diver shines a torch on the hull of an old wreck covered in shells.
A curious octopus slides out of a crack, changes color, and wraps an arm around the light.
In a snowy town, children pull sleds up a hill and race down, shouting and laughing.
Smoke rises from chimneys, and the windows of the cottages glow yellow in the blue evening.
A painter stands at an easel by a canal, mixing colors as boats glide under stone bridges.
She adds a streak of orange for the sunset, steps back, and tilts her head to study it.
A dancer in a white dress spins across an empty stage, lit by a single spotlight.
Her shadow stretches and shrinks on the back wall as the music swells and fades.
A vintage car drives along a coastal road, its chrome shining, palm trees rushing past.
The driver wears sunglasses and a scarf, and the radio plays an old, happy tune.
A field of lavender ripples in the breeze, and a bee hums from one stem to the next.
Thick clouds roll over the mountains, and lightning flashes between the peaks at dusk.
A baby laughs as bubbles drift around her, trying to catch them with chubby hands.
An owl blinks on a branch in the moonlight, turns its head, and flies silently away.
Runners cross the finish line of a marathon, tired but cheering, arms in the air.
A barista pours milk into a cup of coffee, drawing a leaf in the foam with a steady hand.
Deer step carefully out of the woods into a meadow wet with dew, ears turning at every sound.
A kayak glides across a still lake that mirrors the pine trees and the snowy peaks.
Thousands of stars fill the desert sky, and the bright band of the galaxy arches over the dunes.
A time-lapse shows flowers opening, clouds racing, and the city lights switching on one by one.
Slowly the camera pans left, then tilts up, then pushes in on the face of a smiling child.
)text";

class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::string_view text) : rest_(text) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    while (!rest_.empty()) {
      const std::size_t end = rest_.find('\n');
      line_ = std::string(rest_.substr(0, end));
      rest_ = end == std::string_view::npos ? std::string_view{} : rest_.substr(end + 1);
      if (!line_.empty()) return;
    }
    done_ = true;
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  std::string_view rest_;
  std::string line_;
  bool done_ = false;
};

constexpr const char* kSpecialTokensMap = R"json({
  "eos_token": {
    "content": "</s>",
    "lstrip": false,
    "normalized": false,
    "rstrip": false,
    "single_word": false
  },
  "pad_token": {
    "content": "<pad>",
    "lstrip": false,
    "normalized": false,
    "rstrip": false,
    "single_word": false
  },
  "unk_token": {
    "content": "<unk>",
    "lstrip": false,
    "normalized": false,
    "rstrip": false,
    "single_word": false
  }
}
)json";

// transformers' T5Tokenizer with legacy behaviour and no <extra_id_*> tokens; model_max_length is
// its "no limit" value (int(1e30)), spelled as transformers writes it.
constexpr const char* kTokenizerConfig = R"json({
  "add_prefix_space": true,
  "added_tokens_decoder": {
    "0": {
      "content": "<pad>",
      "lstrip": false,
      "normalized": false,
      "rstrip": false,
      "single_word": false,
      "special": true
    },
    "1": {
      "content": "</s>",
      "lstrip": false,
      "normalized": false,
      "rstrip": false,
      "single_word": false,
      "special": true
    },
    "2": {
      "content": "<unk>",
      "lstrip": false,
      "normalized": false,
      "rstrip": false,
      "single_word": false,
      "special": true
    }
  },
  "additional_special_tokens": [],
  "clean_up_tokenization_spaces": true,
  "eos_token": "</s>",
  "extra_ids": 0,
  "legacy": true,
  "model_max_length": 1000000000000000019884624838656,
  "pad_token": "<pad>",
  "sp_model_kwargs": {},
  "tokenizer_class": "T5Tokenizer",
  "unk_token": "<unk>"
}
)json";

}  // namespace

std::string train_builtin_spiece_model(int vocab_size) {
  VINF_CHECK(vocab_size >= 4 && vocab_size <= kBuiltinSpieceMaxVocab, "the built-in tokenizer text supports 4 to ",
             kBuiltinSpieceMaxVocab, " pieces, not ", vocab_size);
  // One thread and no sampling of sentences: the pieces and their scores do not depend on timing.
  // The generator's seed is fixed too, though the unigram trainer draws nothing without sampling.
  sentencepiece::SetRandomGeneratorSeed(1);
  const std::unordered_map<std::string, std::string> args{
      {"model_type", "unigram"}, {"vocab_size", std::to_string(vocab_size)}, {"hard_vocab_limit", "true"},
      {"character_coverage", "1.0"}, {"pad_id", "0"},           {"eos_id", "1"},
      {"unk_id", "2"},               {"bos_id", "-1"},          {"num_threads", "1"},
      {"input_sentence_size", "0"},  {"minloglevel", "2"}};
  LineIterator lines(kText);
  std::string model;
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  VINF_CHECK(status.ok(), "SentencePiece could not train the built-in tokenizer (", vocab_size,
             " pieces): ", status.ToString());
  return model;
}

void write_builtin_t5_tokenizer(const std::string& dir, int vocab_size) {
  const std::string model = train_builtin_spiece_model(vocab_size);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  VINF_INPUT_CHECK(!ec, "cannot create the tokenizer directory ", dir, ": ", ec.message());
  io::write_file_atomically(dir + "/spiece.model", model);
  io::write_file_atomically(dir + "/special_tokens_map.json", kSpecialTokensMap);
  io::write_file_atomically(dir + "/tokenizer_config.json", kTokenizerConfig);
}

}  // namespace vinf::model
