//! Decoding never embeds an id outside the vocabulary as a silent zero vector: the generator
//! refuses a prompt whose ids a model's vocabulary does not hold (a tokenizer that is not the
//! model's), and so does the model's own decoding entry.

use boost_config::Config;
use boost_data::Tokenizer;
use boost_model::{KvCache, Layout, Model};
use boost_tensor::cpu::Cpu;
use boost_train::generate::Generator;

#[test]
fn ids_outside_the_vocabulary_are_refused() {
    let docs: Vec<String> = (0..40).map(|i| format!("the king speaks of love and war to his friend {i}\n")).collect();
    let tokenizer = Tokenizer::train_bpe(&docs, 300).unwrap();
    let cfg = Config::load(
        None,
        &["model.d=32", "model.d_ff=64", "model.layers=1", "model.heads=4", "model.rank=8", "model.vocab=64"]
            .map(String::from),
    )
    .unwrap();
    let mut model = Model::new(Cpu::<f32>::new(), &cfg.model, Layout::single(&cfg.model), 0).unwrap();
    let cache = KvCache::new(&model, 16);
    let e = format!("{:#}", model.decode(&cache, &[3, 64]).unwrap_err());
    assert!(e.contains("token id 64 (position 1)") && e.contains("vocabulary of 64"), "{e}");
    model.decode(&cache, &[3, 63]).unwrap();
    let generator = Generator::new(model, tokenizer, 16);
    let e = format!("{:#}", generator.prompt_ids("the king speaks").unwrap_err());
    assert!(e.contains("outside the model's vocabulary of 64"), "{e}");
}
