//! Key arguments as an application writes them: string parts take `&str`, alone and in tuples,
//! with integer literals beside them inferring their part's type.

use cellar::prelude::*;

mod common;

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "ka_users")]
struct User {
    #[cellar(key)]
    handle: String,
    name: String,
}

#[derive(Entity, Debug, Clone, PartialEq)]
#[cellar(table = "ka_posts")]
struct Post {
    #[cellar(partition)]
    author: String,
    #[cellar(key)]
    number: u32,
    #[cellar(key)]
    lang: String,
    text: String,
}

on_every_backend! {
fn string_key_parts_take_str(db: Db) {
    let users = db.repo::<User>().unwrap();
    users.put(&User { handle: "ada".into(), name: "Ada".into() }).unwrap();
    assert_eq!(users.get("ada").unwrap().map(|u| u.name), Some("Ada".to_string()));
    assert!(users.exists("ada").unwrap());
    assert_eq!(users.get("bob").unwrap(), None);
    users.delete("ada").unwrap();
    assert_eq!(users.get("ada").unwrap(), None);

    let posts = db.repo::<Post>().unwrap();
    let post = Post { author: "ada".into(), number: 7, lang: "en".into(), text: "hello".into() };
    posts.put(&post).unwrap();
    // `7` infers `u32` from the key's part beside the borrowed strings.
    assert_eq!(posts.get(("ada", 7, "en")).unwrap(), Some(post.clone()));
    assert_eq!(posts.get(("ada".to_string(), 7, "en".to_string())).unwrap(), Some(post));
}
}
